"""Every store that can hold a data subject's data is known to the erasure."""

from __future__ import annotations

from django.apps import apps

from memoryhub.services.forget import ERASURE_REGISTRY

#: Field names that hold what a person said or is called (content, names, free text).
SUBJECT_FIELDS = {
    "content",
    "namespace",
    "text",
    "filename",
    "metadata",
    "payload",
    "tags",
    "key",
    "object_repr",
    "change_message",
    "selector",
    "session_data",
}


def test_every_model_with_a_subject_data_field_is_registered():
    unregistered = []
    for model in apps.get_models():
        names = {field.name for field in model._meta.get_fields() if field.concrete}
        label = model._meta.label
        if names & SUBJECT_FIELDS and label not in ERASURE_REGISTRY:
            unregistered.append(f"{label}: {sorted(names & SUBJECT_FIELDS)}")
    assert unregistered == [], (
        "Register how an erasure reaches these (memoryhub.services.forget.ERASURE_REGISTRY), "
        f"or say why it need not: {unregistered}"
    )


def test_the_registry_names_only_models_that_exist():
    labels = {model._meta.label for model in apps.get_models()}
    assert set(ERASURE_REGISTRY) <= labels
