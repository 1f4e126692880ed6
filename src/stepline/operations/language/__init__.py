"""The filter language and the tag rules: parsed once into a small AST (``tree``), checked
against the columns (``columns``), rendered to parameterised SQL per dialect (``render``)."""

from .errors import FilterError, TagError
from .parser import parse
from .render import PkWindow, Rendered, render, render_driver, split_driver
from .tags import TagValue, check_tags
from .tree import Filter

__all__ = [
    "Filter",
    "FilterError",
    "PkWindow",
    "Rendered",
    "TagError",
    "TagValue",
    "check_tags",
    "parse",
    "render",
    "render_driver",
    "split_driver",
]
