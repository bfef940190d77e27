"""``Authorization: Api-Key <key>``: tenant-bound API keys for the REST API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiKey

from . import throttling

KEYWORD = "Api-Key"
#: ``last_used_at`` is written at most this often per key, to keep reads cheap.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiKeyUser:
    """The principal of a request authenticated by an API key (not a Django user)."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, api_key: ApiKey, *, door: str = "api-key") -> None:
        self.api_key = api_key
        #: The door the key came through: its principal is named ``<door>:<prefix>``.
        self.door = door
        self.username = f"{door}:{api_key.prefix}"

    def __str__(self) -> str:
        return self.username


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticate ``Authorization: Api-Key <key>``; other schemes are left to others.

    A revoked, expired, unknown or malformed key, or a key of an inactive org, is a 401.
    """

    keyword = KEYWORD
    #: The schemes read as an API key (the MCP door also reads ``Bearer``).
    keywords: tuple[str, ...] = (KEYWORD,)
    #: What the caller is called as an actor: ``api-key:<prefix>``.
    door = "api-key"

    def authenticate(self, request: Request) -> tuple[ApiKeyUser, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in {k.lower().encode() for k in self.keywords}:
            return None
        throttling.refuse_if_failing(request)
        try:
            return self._authenticate(request, header)
        except exceptions.AuthenticationFailed as failure:
            if failure.get_codes() == "invalid_key":
                throttling.count_failure(request)
            raise

    def _authenticate(self, request: Request, header: list[bytes]) -> tuple[ApiKeyUser, ApiKey]:
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                _("Invalid Api-Key header: expected 'Api-Key <key>'."), code="invalid_key"
            )
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError:
            key = ""
        if not key or not key.isprintable():  # NUL and control characters never reach SQL
            raise exceptions.AuthenticationFailed(_("Invalid Api-Key header."), code="invalid_key")
        # The URL's domain is read with the key, in the same query (resolve_domain).
        kwargs = (getattr(request, "parser_context", None) or {}).get("kwargs") or {}
        slug = kwargs.get("domain")
        return self.authenticate_key(key, domain_slug=slug if isinstance(slug, str) else None)

    def authenticate_key(
        self, key: str, *, domain_slug: str | None = None
    ) -> tuple[ApiKeyUser, ApiKey]:
        try:
            api_key = ApiKey.objects.get_from_key(key, domain_slug=domain_slug)
        except ApiKey.DoesNotExist:
            raise exceptions.AuthenticationFailed(
                _("Unknown or revoked API key."), code="invalid_key"
            ) from None
        if api_key.has_expired:
            raise exceptions.AuthenticationFailed(_("API key expired."), code="expired_key")
        if not api_key.org.is_active:
            raise exceptions.AuthenticationFailed(_("Org is inactive."), code="inactive_org")
        self._touch(api_key)
        return ApiKeyUser(api_key, door=self.door), api_key

    @staticmethod
    def _touch(api_key: ApiKey) -> None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            api_key.last_used_at = now

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def request_api_key(request: Any) -> ApiKey | None:
    """The API key a request was authenticated with, if any."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiKey) else None
