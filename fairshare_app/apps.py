from django.apps import AppConfig


class FairshareAppConfig(AppConfig):
    name = "fairshare_app"
    verbose_name = "Fair share and usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register as the usage provider the scheduling cycle and the API ask for: queues_app
        does not import fairshare_app, fairshare_app tells it where usage comes from."""
        from fairshare_app import selectors
        from queues_app.cycle import usage

        usage.register(usage.UsageProvider(name="fairshare_app", engine_inputs=selectors.engine_inputs,
                                           normalized_usage=selectors.normalized_usage))
