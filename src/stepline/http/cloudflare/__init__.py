"""Cloudflare's Workflows REST API, spoken by ``stepline serve`` under a prefix (``/client/v4``)
so that ``wrangler`` and the ``cloudflare`` SDK drive stepline unchanged (docs/cloudflare.md).

A thin translation onto the client layer, as ``/api`` is: :mod:`.routes` (the paths),
:mod:`._accounts`, :mod:`._workflows`, :mod:`._instances` (the handlers), :mod:`._input` (the
requests' shapes), :mod:`.shapes` (records in Cloudflare's shapes), :mod:`.envelope` (the
response envelope and its errors).
"""

from .envelope import error_response
from .routes import CloudflareApi

__all__ = ["CloudflareApi", "error_response"]
