from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "tests.host_project.accounts"
    label = "accounts"
    default_auto_field = "django.db.models.BigAutoField"
