from django.apps import AppConfig


class DataflowConfig(AppConfig):
    name = "dataflow"
    verbose_name = "Dataflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import connectors  # noqa: F401  (registers every connector)
