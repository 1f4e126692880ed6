"""The old workers of the deploy process test: version 1 as first deployed."""

from ._deploy_flows import OldV1

WORKFLOWS = [OldV1]
