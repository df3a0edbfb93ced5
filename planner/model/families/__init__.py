"""Model families planner counts exactly, one module per family, found by config model_type.

registry.FAMILIES and registry.VISION_TOWERS name every builder; each family module is imported when a config
of one of its types is first counted.
"""

from planner.model.families.registry import FAMILIES, VISION_TOWERS

__all__ = ["FAMILIES", "VISION_TOWERS"]
