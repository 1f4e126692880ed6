"""The routes of Cloudflare's Workflows REST API, mounted under the configured prefix
(``/client/v4``): what ``wrangler`` (``CLOUDFLARE_API_BASE_URL``) and the ``cloudflare`` SDK
(``Cloudflare(base_url=...)``) call. Every route under ``/accounts/{account_id}`` first checks
the account id."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._project_cloudflare import CloudflareConfig
from ...engine import Engine
from .._input import RequestReader
from .._lookup import Lookup
from ..api import Endpoint, by_method
from ..roles import guarded
from ._accounts import AccountEndpoints
from ._instances import InstanceEndpoints
from ._workflows import WorkflowEndpoints


class CloudflareApi:
    """The handlers, bound to one engine, its limits and the server's token."""

    def __init__(
        self,
        engine: Engine,
        config: CloudflareConfig,
        *,
        lookup: Lookup,
        reader: RequestReader,
        token: str | None,
    ) -> None:
        self.config = config
        self.accounts = AccountEndpoints(config, token)
        self.workflows = WorkflowEndpoints(engine, lookup)
        self.instances = InstanceEndpoints(engine, lookup, reader)

    def _in_account(self, handler: Endpoint) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            self.accounts.check_account(request.path_params["account_id"])
            return await handler(request)

        return endpoint

    def routes(self) -> list[Route]:
        """The routes, relative to the prefix."""
        workflows, instances, accounts = self.workflows, self.instances, self.accounts
        workflow = "/accounts/{account_id}/workflows/{name}"
        many = workflow + "/instances"
        one = many + "/{id}"
        version = workflow + "/versions/{version}"
        scoped: dict[str, dict[str, Endpoint]] = {
            "/accounts/{account_id}": {"GET": accounts.get_account},
            "/accounts/{account_id}/workflows": {"GET": workflows.list_workflows},
            workflow: {
                "GET": workflows.get_workflow,
                "PUT": workflows.deploy,
                "DELETE": workflows.delete,
            },
            workflow + "/versions": {"GET": workflows.list_versions},
            version: {"GET": workflows.get_version},
            version + "/graph": {"GET": workflows.get_graph},
            many: {"GET": instances.list_instances, "POST": instances.create_instance},
            many + "/batch": {"POST": instances.create_batch},
            one: {"GET": instances.get_instance},
            one + "/step": {"GET": instances.get_step},
            one + "/status": {"PATCH": instances.change_status},
            one + "/events/{type}": {"POST": instances.send_event},
        }
        plain: dict[str, dict[str, Endpoint]] = {
            "/user/tokens/verify": {"GET": accounts.verify_token},
            "/user": {"GET": accounts.user},
            "/accounts": {"GET": accounts.list_accounts},
            "/memberships": {"GET": accounts.memberships},
        }
        paths = plain | {
            path: {method: self._in_account(h) for method, h in handlers.items()}
            for path, handlers in scoped.items()
        }
        return [
            Route(path, by_method(guarded("cloudflare", path, handlers)), methods=list(handlers))
            for path, handlers in paths.items()
        ]
