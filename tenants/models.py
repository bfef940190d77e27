"""Orgs, domains, operator memberships and tenant-bound API keys."""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connections, models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from rest_framework_api_key.models import AbstractAPIKey, APIKeyManager


class OrgQuerySet(models.QuerySet["Org"]):
    def active(self) -> OrgQuerySet:
        return self.filter(is_active=True)

    def get_or_create_for(self, external_ref: str, *, name: str = "") -> tuple[Org, bool]:
        """The org of the host's tenant ``external_ref`` (its own id for a customer),
        created with a slug from ``name`` (or the reference) the first time."""
        from django.db import IntegrityError, transaction
        from django.utils.text import slugify

        if not external_ref:
            raise ValueError("external_ref may not be empty.")
        org = self.filter(external_ref=external_ref).first()
        if org is not None:
            return org, False
        base = slugify(name or external_ref)[:55] or "org"
        slug, n = base, 1
        while self.filter(slug=slug).exists():
            n += 1
            slug = f"{base}-{n}"
        try:
            with transaction.atomic():
                return self.create(
                    external_ref=external_ref, slug=slug, name=name or external_ref
                ), True
        except IntegrityError:  # created meanwhile by another process
            return self.get(external_ref=external_ref), False


class Org(models.Model):
    """A tenant: a customer organisation. All memory belongs to exactly one org."""

    slug = models.SlugField(_("slug"), max_length=64, unique=True)
    name = models.CharField(_("name"), max_length=200)
    external_ref = models.CharField(
        _("external reference"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("The host application's own id for this organisation, if any."),
    )
    is_active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    objects = OrgQuerySet.as_manager()

    class Meta:
        verbose_name = _("org")
        verbose_name_plural = _("orgs")
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["external_ref"],
                condition=~Q(external_ref=""),
                name="tenants_org_unique_external_ref",
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.slug


class Domain(models.Model):
    """An area of an org's memory (``support``, ``sales``); memory is scoped by it."""

    org = models.ForeignKey(
        Org, on_delete=models.CASCADE, related_name="domains", verbose_name=_("org")
    )
    slug = models.SlugField(_("slug"), max_length=64)
    name = models.CharField(_("name"), max_length=200, blank=True, default="")
    hybrid_vector_weight = models.FloatField(
        _("hybrid vector weight"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=_(
            "Hybrid search: the vector leg's share of the fused score, 0 to 1 (the keyword"
            " leg has the rest). Empty: the site's setting, else the embedder's default."
        ),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("domain")
        verbose_name_plural = _("domains")
        ordering = ["org__slug", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["org", "slug"], name="tenants_domain_unique_slug"),
        ]

    def __str__(self) -> str:
        return f"{self.org.slug}/{self.slug}"


class Membership(models.Model):
    """An operator's (a Django user's) access to one org in the admin."""

    class Role(models.TextChoices):
        OWNER = "owner", _("Owner")
        OPERATOR = "operator", _("Operator")
        VIEWER = "viewer", _("Viewer")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("user"),
    )
    org = models.ForeignKey(
        Org, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("org")
    )
    role = models.CharField(_("role"), max_length=16, choices=Role, default=Role.OPERATOR)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "org"], name="tenants_membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.org.slug} ({self.role})"


class ApiKeyManager(APIKeyManager):
    def get_from_key(self, key: str, *, domain_slug: str | None = None) -> ApiKey:
        """The unrevoked key ``key`` (``DoesNotExist`` otherwise), with its org and domain.

        With ``domain_slug``, the id of the key's org's domain of that slug comes in the
        same query, as ``api_key.url_domain == (domain_slug, id or None)``: the API reads
        the key and the URL's domain in one round trip.
        """
        prefix, _, _ = key.partition(".")
        api_key = self._lookup(prefix, domain_slug)
        if not api_key.is_valid(key):
            raise ApiKey.DoesNotExist("Key is not valid.")
        return api_key

    def _lookup(self, prefix: str, domain_slug: str | None) -> ApiKey:
        """One statement: the unrevoked key of ``prefix``, its org, its bound domain, and
        the id of its org's domain ``domain_slug``.

        Plain SQL because every API request authenticates: compiling the ORM's
        three-table query (select_related plus a subquery) cost more than running it.
        The instances are built as the ORM builds them (``from_db``, related caches set).
        """
        sql, parts = _key_lookup_sql(self.db)
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql, [domain_slug, prefix])
            row = cursor.fetchone()
        if row is None:
            raise ApiKey.DoesNotExist("No unrevoked key has this prefix.")
        instances: list[models.Model | None] = []
        start = 0
        for model, names in parts:
            values = row[start : start + len(names)]
            start += len(names)
            is_missing = model is Domain and values[0] is None  # no bound domain
            instances.append(None if is_missing else model.from_db(self.db, names, values))
        api_key, org, domain = instances
        assert isinstance(api_key, ApiKey)
        ApiKey._meta.get_field("org").set_cached_value(api_key, org)
        ApiKey._meta.get_field("domain").set_cached_value(api_key, domain)
        if domain_slug is not None:
            api_key.url_domain = (domain_slug, row[start])
        return api_key


@functools.cache
def _key_lookup_sql(database: str) -> tuple[str, list[tuple[type[models.Model], list[str]]]]:
    """The key lookup's statement and its columns per model, built once per database."""
    quote: Any = connections[database].ops.quote_name
    parts: list[tuple[type[models.Model], list[str]]] = []
    columns: list[str] = []
    for model, alias in ((ApiKey, "k"), (Org, "o"), (Domain, "d")):
        fields = list(model._meta.concrete_fields)
        parts.append((model, [field.attname for field in fields]))
        columns += [f"{alias}.{quote(field.column)}" for field in fields]
    key, org, domain = (m._meta.db_table for m in (ApiKey, Org, Domain))
    sql = (
        f"SELECT {', '.join(columns)},"
        f" (SELECT u.id FROM {quote(domain)} u WHERE u.org_id = k.org_id AND u.slug = %s)"
        f" FROM {quote(key)} k JOIN {quote(org)} o ON o.id = k.org_id"
        f" LEFT JOIN {quote(domain)} d ON d.id = k.domain_id"
        " WHERE k.prefix = %s AND NOT k.revoked"
    )
    return sql, parts


class ApiKey(AbstractAPIKey):
    """A credential for the REST API, bound to one org and optionally one domain.

    Only a hash of the key is stored (djangorestframework-api-key); the plaintext is
    shown once, when the key is created.
    """

    class Permission(models.TextChoices):
        READ = "read", _("read")
        WRITE = "write", _("write")
        FORGET = "forget", _("forget")
        EXPORT = "export", _("export")

    org = models.ForeignKey(
        Org, on_delete=models.CASCADE, related_name="api_keys", verbose_name=_("org")
    )
    domain = models.ForeignKey(
        Domain,
        on_delete=models.CASCADE,
        related_name="api_keys",
        null=True,
        blank=True,
        verbose_name=_("domain"),
        help_text=_("Bind the key to one domain; empty means every domain of the org."),
    )
    can_read = models.BooleanField(_("can read"), default=True)
    can_write = models.BooleanField(_("can write"), default=False)
    can_forget = models.BooleanField(_("can forget"), default=False)
    #: A data subject's access export (GDPR Art. 15 and 20): everything held about them.
    can_export = models.BooleanField(_("can export"), default=False, db_default=False)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True, editable=False)

    objects = ApiKeyManager()
    #: ``(slug, domain id or None)`` when loaded by ``get_from_key(domain_slug=...)``.
    url_domain: tuple[str, int | None] | None = None

    class Meta(AbstractAPIKey.Meta):
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if (
            self.domain_id is not None
            and self.org_id is not None
            and Domain.objects.filter(pk=self.domain_id).exclude(org_id=self.org_id).exists()
        ):
            raise ValidationError({"domain": _("The domain belongs to another org.")})

    @property
    def permissions(self) -> list[str]:
        granted = {
            self.Permission.READ: self.can_read,
            self.Permission.WRITE: self.can_write,
            self.Permission.FORGET: self.can_forget,
            self.Permission.EXPORT: self.can_export,
        }
        return [str(permission) for permission, allowed in granted.items() if allowed]

    def covers_domain(self, org_id: int, domain_id: int) -> bool:
        """Whether this key may act on domain ``domain_id`` of org ``org_id``: its own
        org, and its bound domain if it has one."""
        if org_id != self.org_id:
            return False
        return self.domain_id is None or self.domain_id == domain_id
