"""The synthetic research world: a generated, checkable testbed for training and adversarial evaluation.
Entities, documents and questions are built by :mod:`infra.data.world.generate`; the format is described there."""

from infra.data.world.generate import World, generate_world, load_world, world_files, write_world
from infra.data.world.grammar import FACTS, eval_expression, extract_fact, format_number, parse_number
from infra.data.world.scoring import check_answer
from infra.data.world.spec import AS_OF, FILES, FORMAT, KINDS, QUESTION_FIELDS, SPLITS, WorldError, WorldKnobs
from infra.data.world.wording import FAMILIES, TEST_FAMILIES, TRAIN_FAMILIES

__all__ = [
    "AS_OF",
    "FAMILIES",
    "FORMAT",
    "KINDS",
    "QUESTION_FIELDS",
    "SPLITS",
    "TEST_FAMILIES",
    "TRAIN_FAMILIES",
    "World",
    "WorldError",
    "WorldKnobs",
    "check_answer",
    "eval_expression",
    "extract_fact",
    "format_number",
    "generate_world",
    "load_world",
    "parse_number",
    "world_files",
    "write_world",
]
