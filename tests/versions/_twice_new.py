"""The new workers of the patch routing process test: ``deploy-twice`` patched."""

from ._deploy_flows import PatchedTwice

WORKFLOWS = [PatchedTwice]
