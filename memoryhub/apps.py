from django.apps import AppConfig
from django.core import checks
from django.utils.translation import gettext_lazy as _


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = _("Memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .conf import check_settings

        checks.register(check_settings, "memoryhub")
