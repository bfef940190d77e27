"""The tenant's keys and managers: every tenant-scoped model has ``org`` and ``domain``
keys, an ``objects`` manager scoped by django-scopes, and the explicit ``unscoped`` one."""

from __future__ import annotations

from typing import Any, cast

from django.db import models
from django.db.models.lookups import Exact
from django.db.models.sql.where import WhereNode
from django.utils.translation import gettext_lazy as _
from django_scopes import ScopedManager


def _tenant_key(to: str, verbose_name: Any, options: dict[str, Any]) -> models.ForeignKey[Any, Any]:
    defaults = {"on_delete": models.CASCADE, "related_name": "+", "verbose_name": verbose_name}
    return models.ForeignKey(to, **{**defaults, **options})


def org_key(**options: Any) -> models.ForeignKey[Any, Any]:
    """The foreign key to a row's org as :class:`TenantScopedModel` declares it;
    ``options`` are one model's exceptions to it."""
    return _tenant_key("tenants.Org", _("org"), options)


def domain_key(**options: Any) -> models.ForeignKey[Any, Any]:
    """The foreign key to a row's domain as :class:`TenantScopedModel` declares it;
    ``options`` are one model's exceptions to it."""
    return _tenant_key("tenants.Domain", _("domain"), options)


class TenantForeignKey(models.ForeignKey):
    """A foreign key between two tables of one org's data: its joins also match the org
    (``target.org_id = source.org_id``). The org holds nothing more than the key did,
    but a cluster distributed by org then sees a join inside one shard group, and the
    key's index (``(x_id, org_id)``) serves it. The migrations see a ``ForeignKey``."""

    def get_extra_restriction(self, alias: str | None, related_alias: str | None) -> Any:
        if alias is None or related_alias is None:  # a subquery pushdown: the key alone
            return None
        own = cast("models.Field[Any, Any]", self.model._meta.get_field("org"))
        theirs = cast("models.Field[Any, Any]", self.related_model._meta.get_field("org"))
        condition: Any = Exact(theirs.get_col(alias), own.get_col(related_alias))
        return WhereNode([condition])

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.ForeignKey", args, kwargs


def scoped_manager(manager_class: type[models.Manager[Any]] = models.Manager) -> Any:
    """A manager that answers only inside a tenant scope (django-scopes on the org and
    domain ids) and raises ``ScopeError`` outside one."""
    return ScopedManager(org="org_id", domain="domain_id", _manager_class=manager_class)


class TenantScopedModel(models.Model):
    """A row that belongs to one org and one of its domains, and is read only inside
    their scope: ``objects`` refuses a query outside :func:`memoryhub.scope.tenant_scope`,
    ``unscoped`` is the operator path and the base manager (related lookups work on it).

    A model with a queryset of its own declares both managers again over it
    (``scoped_manager(Manager)`` and ``Manager()``). Where a model's keys differ from
    the ones here it declares that key itself with :func:`org_key` or :func:`domain_key`
    and only the difference, because changing the existing columns or their migration
    state is not this class's to do:

    * ``MemoryRecord`` and ``RecordVersion`` index neither key on its own
      (``db_index=False``): composite indexes lead with them, and a single-column index
      on a million-row table would be a schema change with a cost;
    * ``RecordVersion``'s keys have no verbose names (adding them is a migration);
    * ``KnowledgeBase.domain`` is reachable from the domain (``domain.knowledge_bases``);
    * ``Observation.domain`` is optional: some observations are about the whole org;
    * ``ErasureReceipt`` keeps plain ids instead of the keys (``org = domain = None``):
      a receipt outlives the org and domain it speaks of.
    """

    org = org_key()
    domain = domain_key()

    objects = scoped_manager()
    unscoped = models.Manager()  # noqa: DJ012 (ScopedManager() is a manager, not a field)

    class Meta:
        abstract = True
        default_manager_name = "objects"
        base_manager_name = "unscoped"

    def _do_update(self, base_qs: Any, using: Any, pk_val: Any, values: Any, *args: Any) -> Any:
        # A saved row keeps its org (the distribution column of a cluster, which an
        # UPDATE may not set), and is found by its org with its id: one shard group.
        values = [value for value in values if value[0].attname != "org_id"]
        return super()._do_update(base_qs.filter(org_id=self.org_id), using, pk_val, values, *args)
