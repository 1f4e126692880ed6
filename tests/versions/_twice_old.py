"""The old workers of the patch routing process test: ``deploy-twice`` as first deployed."""

from ._deploy_flows import OldTwice

WORKFLOWS = [OldTwice]
