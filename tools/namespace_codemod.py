"""Rewrite creditgym's top-level imports to the creditgym.* namespace (one-shot)."""

import pathlib
import re
import sys

PKGS = "agents|envs|credit|measure|trainers|benchmarks|integrations"
STRPKGS = "agents|envs|credit|measure|trainers|integrations"
root = pathlib.Path(sys.argv[1])
imp = re.compile(rf"^(\s*)(from|import) ({PKGS})(?=[\s.])", re.M)
# dotted module strings: "envs.sysdiag.env:SysDiagEnv", "agents.workers", getLogger("agents.models")
strs = re.compile(rf"""(?<=["'])({STRPKGS})(?=\.[a-z_]+[a-zA-Z_.:]*["'])""")
bare = re.compile(rf"""(?<=["'])({PKGS})(?=["'])""")
n = 0
for path in root.rglob("*.py"):
    rel = path.relative_to(root)
    if rel.parts[0] in (".venv", ".venv-verl", "results", ".git", "creditgym.egg-info", "tools"):
        continue
    text = path.read_text()
    # `import envs` binds `envs`: keep that name with `from creditgym import envs`.
    new = re.sub(
        rf"^(\s*)import ({PKGS})(\s*(#.*)?)$",
        lambda m: f"{m[1]}from creditgym import {m[2]}{m[3]}",
        text,
        flags=re.M,
    )
    # `import envs.code.sandbox` (no `as`) binds `envs` too: load the submodule and bind the name.
    new = re.sub(
        rf"^(\s*)import ({PKGS})(\.[\w.]+)(\s*(#.*)?)$",
        lambda m: f"{m[1]}import creditgym.{m[2]}{m[3]}\n{m[1]}from creditgym import {m[2]}{m[4]}",
        new,
        flags=re.M,
    )
    new = imp.sub(lambda m: f"{m[1]}{m[2]} creditgym.{m[3]}", new)
    new = strs.sub(lambda m: f"creditgym.{m[1]}", new)
    new = new.replace('import_module("envs")', 'import_module("creditgym.envs")')
    new = new.replace(
        '"creditgym.agents.workers", "envs"]', '"creditgym.agents.workers", "creditgym.envs"]'
    )
    new = new.replace(
        'LIBRARY_PACKAGES = ("envs", "agents", "credit", "trainers", "benchmarks")',
        'LIBRARY_PACKAGES = ("creditgym", "__main__")',
    )
    # Imports inside code strings (`python -c` scripts): "...; from benchmarks import lock".
    new = re.sub(
        rf"""(?<=["';] )(from|import) ({PKGS})(?=[.\s])|(?<=["'])(from|import) ({PKGS})(?=[.\s])""",
        lambda m: f"{m[1] or m[3]} creditgym.{m[2] or m[4]}",
        new,
    )
    new = new.replace('"agents.models: fetching', '"creditgym.agents.models: fetching')
    new = new.replace(
        '"envs.alfworld.data: generating', '"creditgym.envs.alfworld.data: generating'
    )
    if new != text:
        n += 1
        path.write_text(new)
for path in list(root.glob("*.md")) + list(root.glob("docs/*.md")):
    text = path.read_text()
    new = re.sub(
        rf"^(\s*)(from|import) ({PKGS})(?=[\s.])",
        lambda m: f"{m[1]}{m[2]} creditgym.{m[3]}",
        text,
        flags=re.M,
    )
    new = re.sub(
        rf"(?<=`)(from|import) ({PKGS})(?=[\s.])", lambda m: f"{m[1]} creditgym.{m[2]}", new
    )
    if new != text:
        n += 1
        path.write_text(new)
print("files changed:", n)
