"""factory-boy factories for tenants and memory."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from memoryhub.models import KnowledgeBase, MemoryRecord, content_hash
from tenants.models import ApiKey, Domain, Membership, Org


class OrgFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Org
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"org-{n}")
    name = factory.LazyAttribute(lambda org: org.slug.title())


class DomainFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Domain

    org = factory.SubFactory(OrgFactory)
    slug = factory.Sequence(lambda n: f"domain-{n}")
    name = factory.LazyAttribute(lambda domain: domain.slug.title())


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    is_staff = True
    password = factory.django.Password("correct horse battery staple")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    org = factory.SubFactory(OrgFactory)


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = KnowledgeBase

    domain = factory.SubFactory(DomainFactory)
    org = factory.SelfAttribute("domain.org")
    name = factory.Sequence(lambda n: f"kb-{n}")

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return model_class.unscoped.create(*args, **kwargs)


class MemoryRecordFactory(factory.django.DjangoModelFactory):
    """Creates a record directly (no write service, no indexing): for read-side tests."""

    class Meta:
        model = MemoryRecord

    knowledge_base = factory.SubFactory(KnowledgeBaseFactory)
    org = factory.SelfAttribute("knowledge_base.org")
    domain = factory.SelfAttribute("knowledge_base.domain")
    content = factory.Sequence(lambda n: f"Remembered fact number {n}.")
    content_hash = factory.LazyAttribute(lambda record: content_hash(record.content))

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return model_class.unscoped.create(*args, **kwargs)


def create_api_key(**kwargs: object) -> tuple[ApiKey, str]:
    """An API key (saved) and its plaintext; defaults to a read-only key of a new org."""
    if "org" not in kwargs:
        kwargs["org"] = OrgFactory()
    kwargs.setdefault("name", "test key")
    return ApiKey.objects.create_key(**kwargs)


def key_client(tenant, **permissions: object):
    """A DRF test client that sends a new API key of ``tenant``'s org."""
    from rest_framework.test import APIClient

    _, key = create_api_key(org=tenant.org, **permissions)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client
