"""What the task endpoints take and answer (a task itself as the retry endpoint answers it,
scheduling.api.serializers.TaskSerializer). Input serializers only parse (types, lengths, which
fields may be sent); what a value may do is the services' decision."""

from django.utils import timezone
from rest_framework import serializers

from retryops.api.fields import Flag, Input, JsonObject, Text
from retryops.api.schema import ErrorDetailSerializer
from retryops.inputs import MAX_ID
from scheduling.api.serializers import AS_NEW_INSTANCE, TaskSerializer
from scheduling.models import Attempt
from scheduling.services.task_retry import MAX_TASKS


class Moment(serializers.DateTimeField):
    """An ISO 8601 date and time with its time zone: one without would be read in the server's."""

    default_error_messages = {"naive": "must carry a time zone (Z or an offset such as +08:00)."}

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


class AttemptSerializer(serializers.ModelSerializer):
    """One execution of a task, on one resource."""

    resource_key = serializers.CharField(source="resource.key", read_only=True, allow_null=True)

    class Meta:
        model = Attempt
        fields = ["id", "number", "resource", "resource_key", "worker", "started_at", "scheduled_for", "finished_at",
                  "outcome", "error_class", "error_message", "error_signature", "category", "action", "duration_ms"]
        read_only_fields = fields


class TaskDetailSerializer(TaskSerializer):
    """A task with its attempts, first to last."""

    attempts = AttemptSerializer(many=True, read_only=True, source="attempts.all")

    class Meta(TaskSerializer.Meta):
        fields = [*TaskSerializer.Meta.fields, "attempts"]
        read_only_fields = fields


class TaskCreateSerializer(Input):
    flow = Text(max_length=100, help_text="The flow to run, by its registered name.")
    pool = Text(help_text="The pool whose resources it runs with, by name.")
    payload = JsonObject(required=False, help_text="What the flow works on (a JSON object); default {}.")
    resource = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False,
                                        help_text="A resource of the pool to run with, by id; default: any.")
    strict = Flag(default=True, help_text="With a resource: true (the default) runs only on it, an attempt that "
                                          "cannot have it fails; false lets a retry move to another resource. "
                                          "Without one it means nothing.")
    policy = Text(max_length=100, required=False, help_text="A retry policy's name; default: the default policy.")
    run_at = Moment(required=False, help_text="When its first attempt is due (at most a year ahead); default: now.")


class CancelSerializer(Input):
    reason = Text(allow_blank=True, default="", max_length=1000, help_text="Why, for its timeline and the audit log.")


class EmptySerializer(Input):
    """No body, or an empty object."""


class TaskRetryRequestSerializer(Input):
    """One task (`task`) or a batch (`tasks`); not both."""

    task = serializers.IntegerField(min_value=1, max_value=MAX_ID, required=False, help_text="A task's id.")
    tasks = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=MAX_ID), required=False,
                                  min_length=1, max_length=MAX_TASKS,
                                  help_text=f"Up to {MAX_TASKS} task ids, each once; retried in this order.")
    as_new_instance = Flag(default=False, help_text=AS_NEW_INSTANCE)

    body_rules = {"oneOf": [{"required": ["task"]}, {"required": ["tasks"]}],
                  # The service refuses a task named twice.
                  "properties": {"tasks": {"uniqueItems": True}}}

    def validate(self, data):
        if ("task" in data) == ("tasks" in data):
            raise serializers.ValidationError({"task": ["send task (one id) or tasks (a list of ids), not both"]})
        return data


class TaskRetryResultSerializer(serializers.Serializer):
    """The outcome of one task's retry."""

    task = serializers.IntegerField(help_text="The task asked for.")
    status = serializers.IntegerField(help_text="What a retry of this task alone would have answered: 201 with the "
                                                "new task, or the error's status (404, 409, 400).")
    retry = TaskSerializer(allow_null=True, help_text="The new task, holding the resource; null when refused.")
    error = ErrorDetailSerializer(allow_null=True, help_text="Why it was not retried, in the API's error shape; "
                                                             "null when retried.")


class TaskRetryBatchSerializer(serializers.Serializer):
    retried = serializers.IntegerField(help_text="How many new tasks were started.")
    refused = serializers.IntegerField(help_text="How many tasks were not retried.")
    results = TaskRetryResultSerializer(many=True, help_text="One per task asked for, in the order asked.")
