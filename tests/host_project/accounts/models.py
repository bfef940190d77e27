from django.contrib.auth.models import AbstractUser
from django.db import models


class Account(AbstractUser):
    """The monolith's own user model."""

    employee_number = models.CharField(max_length=20, blank=True, default="")
