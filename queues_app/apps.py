from django.apps import AppConfig


class QueuesAppConfig(AppConfig):
    name = "queues_app"
    verbose_name = "Scheduling: queues, nodes, workloads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from queues_app import checks  # noqa: F401 - registers the cycle settings check
