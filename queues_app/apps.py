from django.apps import AppConfig


class QueuesAppConfig(AppConfig):
    name = "queues_app"
    verbose_name = "Scheduling: queues, nodes, workloads"
    default_auto_field = "django.db.models.BigAutoField"
