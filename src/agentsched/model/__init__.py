"""Data model: tool cards, workflows, mappings, execution records."""

from agentsched.model.cards import CardSet, ToolCard, builtin_card_sets, load_card_set
from agentsched.model.execution import Execution, Status, TaskSpan
from agentsched.model.mapping import (
    enumerate_mappings,
    format_mapping,
    mapping_key,
    oracle_match,
    parse_mapping,
    parse_mode,
    validate_mapping,
)
from agentsched.model.tool import Tool
from agentsched.model.workflow import DecisionSpace, Mode, Task, Workflow
from agentsched.model.workflow_io import load_workflow_file, parse_workflow

__all__ = [
    "CardSet",
    "DecisionSpace",
    "Execution",
    "Mode",
    "Status",
    "Task",
    "TaskSpan",
    "Tool",
    "ToolCard",
    "Workflow",
    "builtin_card_sets",
    "enumerate_mappings",
    "format_mapping",
    "load_card_set",
    "load_workflow_file",
    "mapping_key",
    "oracle_match",
    "parse_mapping",
    "parse_mode",
    "parse_workflow",
    "validate_mapping",
]
