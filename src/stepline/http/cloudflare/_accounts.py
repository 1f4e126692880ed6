"""What Cloudflare's clients ask before a Workflows call: whether the token is good
(``/user/tokens/verify``) and which accounts it reaches (``/memberships``, ``/accounts``).
Stepline has one account, the configured id (or :data:`DEFAULT_ACCOUNT`), and no users."""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..._project_cloudflare import CloudflareConfig
from ..errors import ApiError
from . import _input
from .envelope import ok, page_info

ACCOUNT_NAME = "stepline"


class AccountEndpoints:
    """Token verification and the one account, for ``token`` (None: no token is required)."""

    def __init__(self, config: CloudflareConfig, token: str | None) -> None:
        self.config = config
        # Stable per token, and nothing of the token itself.
        secret = (token or "").encode()
        self.token_id = hashlib.sha256(b"stepline-token:" + secret).hexdigest()[:32]

    def check_account(self, account_id: str) -> None:
        """Refuse an account id other than the configured one (any id when none is)."""
        expected = self.config.account_id
        if expected is not None and account_id != expected:
            raise ApiError(
                403,
                "account_not_found",
                f"this stepline server serves account {expected!r}, not {account_id!r}; set "
                f"CLOUDFLARE_ACCOUNT_ID={expected} (or [cloudflare] account_id in stepline.toml)",
            )

    def _account(self, account_id: str | None = None) -> dict[str, Any]:
        return {
            "id": account_id or self.config.listed_account,
            "name": ACCOUNT_NAME,
            "type": "standard",
            "settings": {},
        }

    async def verify_token(self, request: Request) -> Response:
        return ok({"id": self.token_id, "status": "active"})

    async def user(self, request: Request) -> Response:
        raise ApiError(
            403, "no_user", "stepline has no user accounts: its API token is the server's own"
        )

    async def list_accounts(self, request: Request) -> Response:
        page, per_page = _input.page_of(request, 20)
        shown = [self._account()] if page == 1 else []
        return ok(shown, page_info(page, per_page, len(shown), 1))

    async def get_account(self, request: Request) -> Response:
        account_id = request.path_params["account_id"]
        self.check_account(account_id)
        return ok(self._account(account_id))

    async def memberships(self, request: Request) -> Response:
        page, per_page = _input.page_of(request, 20)
        member = {
            "id": self.token_id,
            "status": "accepted",
            "account": self._account(),
            "roles": [],
        }
        shown = [member] if page == 1 else []
        return ok(shown, page_info(page, per_page, len(shown), 1))
