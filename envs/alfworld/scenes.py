"""ALFWorld's own scene inventories and placement tables, read from the installed package.

Everything a generated game may contain comes from `alfworld.gen`:
- the object and receptacle types of each AI2-THOR floor plan
  (`alfworld/gen/layouts/FloorPlan<N>-objects.json`), and how many instances of each
  receptacle the plan has (`FloorPlan<N>-openable.json`);
- which receptacle type may hold which object type (`constants.VAL_RECEPTACLE_OBJECTS`);
- which objects can be cleaned / heated / cooled / toggled (`constants.VAL_ACTION_OBJECTS`);
- which task type is valid in which room kind (`constants.GOALS_VALID`), and the train /
  test floor plans (`constants.TRAIN_SCENE_NUMBERS`, `constants.TEST_SCENE_NUMBERS`).
ALFRED (Shridhar et al. 2020) and ALFWorld (Shridhar et al. 2021) built their games from
these same tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import alfworld.gen.constants as constants

LAYOUTS_DIR = Path(constants.__file__).parent / "layouts"

# ALFWorld's six task types, in the numbering of `alfred_tw_env.TASK_TYPES`.
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# Room kinds as ALFRED names them -> floor-plan number ranges (`constants.SCENE_TYPE`).
ROOM_KINDS: tuple[str, ...] = ("Kitchen", "LivingRoom", "Bedroom", "Bathroom")

# Receptacles that are furniture (static), not carried objects such as bowls or mugs.
STATIC_RECEPTACLES: frozenset[str] = frozenset(constants.RECEPTACLES) - frozenset(
    constants.MOVABLE_RECEPTACLES
)

# The placement table has no entry for lamps: in AI2-THOR they are fixed props standing on
# (or, for floor lamps, beside) a piece of furniture. ALFWorld's goal for
# look_at_obj_in_light needs the lamp `inReceptacle` of something the agent can stand at,
# so each lamp is hosted by one of the furniture types it stands on in the THOR scenes.
LAMP_HOSTS: dict[str, tuple[str, ...]] = {
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf"),
    "FloorLamp": ("SideTable", "Dresser", "ArmChair", "Sofa", "Desk"),
}

# The most instances of one receptacle type a generated room keeps (real kitchens have up
# to ~20 cabinets, which makes the planner's translation several seconds per game).
MAX_RECEPTACLES_PER_TYPE = 5


@dataclass(frozen=True)
class SceneInventory:
    """What one AI2-THOR floor plan contains, restricted to what an ALFWorld game can use.

    Attributes:
        scene_num: floor-plan number (1-30 kitchens, 201-230 living rooms, 301-330
            bedrooms, 401-430 bathrooms).
        room_kind: one of `ROOM_KINDS`.
        receptacle_counts: static receptacle type -> number of instances in the plan.
        object_types: pickupable object types that some receptacle of the plan can hold.
        lamp_types: toggleable lamp types present (DeskLamp, FloorLamp).
    """

    scene_num: int
    room_kind: str
    receptacle_counts: tuple[tuple[str, int], ...]
    object_types: tuple[str, ...]
    lamp_types: tuple[str, ...]


def room_kind_of(scene_num: int) -> str:
    """The room kind of a floor plan (`constants.SCENE_TYPE`)."""
    for kind, numbers in constants.SCENE_TYPE.items():
        if scene_num in numbers:
            return kind
    raise ValueError(f"floor plan {scene_num} belongs to no ALFRED room kind")


def can_contain(receptacle_type: str, object_type: str) -> bool:
    """ALFWorld's placement table: may `object_type` be put in/on `receptacle_type`?"""
    return object_type in constants.VAL_RECEPTACLE_OBJECTS.get(receptacle_type, ())


@cache
def scene_inventory(scene_num: int) -> SceneInventory:
    """Read one floor plan's inventory from the layouts shipped with alfworld."""
    present = set(json.loads((LAYOUTS_DIR / f"FloorPlan{scene_num}-objects.json").read_text()))
    points = json.loads((LAYOUTS_DIR / f"FloorPlan{scene_num}-openable.json").read_text())
    # Sink basins appear in the layouts as "Sink|x|y|z|SinkBasin" or as their own type.
    if "Sink" in present:
        present.add("SinkBasin")
    if "Bathtub" in present:
        present.add("BathtubBasin")
    counts: dict[str, int] = {}
    for receptacle_id in points:
        parts = receptacle_id.split("|")
        receptacle_type = parts[4] if len(parts) > 4 else parts[0]
        counts[receptacle_type] = counts.get(receptacle_type, 0) + 1
    receptacles = sorted(
        (rtype, max(1, counts.get(rtype, 1)))
        for rtype in present & STATIC_RECEPTACLES
        if rtype in constants.VAL_RECEPTACLE_OBJECTS
    )
    receptacle_types = {rtype for rtype, _ in receptacles}
    objects = sorted(
        otype
        for otype in present
        if otype in constants.OBJECTS
        and otype not in STATIC_RECEPTACLES - set(constants.MOVABLE_RECEPTACLES)
        and otype not in LAMP_HOSTS
        and any(can_contain(rtype, otype) for rtype in receptacle_types)
    )
    lamps = sorted(
        lamp
        for lamp in LAMP_HOSTS
        if lamp in present and any(host in receptacle_types for host in LAMP_HOSTS[lamp])
    )
    return SceneInventory(
        scene_num=scene_num,
        room_kind=room_kind_of(scene_num),
        receptacle_counts=tuple(receptacles),
        object_types=tuple(objects),
        lamp_types=tuple(lamps),
    )


def valid_room_kinds(task_type: str) -> frozenset[str]:
    """Room kinds where ALFRED generated `task_type` (`constants.GOALS_VALID`)."""
    return frozenset(constants.GOALS_VALID[task_type])


def train_scenes() -> tuple[int, ...]:
    """Floor plans ALFRED uses for training (24 of 30 per room kind)."""
    return tuple(constants.TRAIN_SCENE_NUMBERS)


def test_scenes() -> tuple[int, ...]:
    """Floor plans ALFRED holds out (6 of 30 per room kind)."""
    return tuple(constants.TEST_SCENE_NUMBERS)


# Which object types each state-changing task needs, from `constants.VAL_ACTION_OBJECTS`.
ACTION_OBJECTS: dict[str, frozenset[str]] = {
    "pick_clean_then_place_in_recep": frozenset(constants.VAL_ACTION_OBJECTS["Cleanable"]),
    "pick_heat_then_place_in_recep": frozenset(constants.VAL_ACTION_OBJECTS["Heatable"]),
    "pick_cool_then_place_in_recep": frozenset(constants.VAL_ACTION_OBJECTS["Coolable"]),
}
# The appliance each of those tasks uses, which must be in the room and is never the target.
ACTION_APPLIANCE: dict[str, str] = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
CLEANABLE = frozenset(constants.VAL_ACTION_OBJECTS["Cleanable"])
HEATABLE = frozenset(constants.VAL_ACTION_OBJECTS["Heatable"])
COOLABLE = frozenset(constants.VAL_ACTION_OBJECTS["Coolable"])
SLICEABLE = frozenset(constants.VAL_ACTION_OBJECTS["Sliceable"])
OPENABLE = frozenset(constants.OPENABLE_CLASS_LIST)
# Every non-furniture type (carried objects, movable receptacles, lamps).
OBJECT_TYPES: frozenset[str] = frozenset(constants.OBJECTS_SET) - STATIC_RECEPTACLES
