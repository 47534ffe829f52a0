from django.apps import AppConfig


class FairshareAppConfig(AppConfig):
    name = "fairshare_app"
    verbose_name = "Fair share and usage"
    default_auto_field = "django.db.models.BigAutoField"
