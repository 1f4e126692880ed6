"""The new workers of the deploy process test: version 1 patched, and version 2."""

from ._deploy_flows import V2, PatchedV1

WORKFLOWS = [PatchedV1, V2]
