"""What the retry and retry history endpoints take and answer."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from retryops.api.fields import Flag, Input, JsonObject, MaskedJson, Text
from scheduling.choices import WAITING_STATES
from scheduling.models import Task


class TaskSerializer(serializers.ModelSerializer):
    """A task: one business instance, run with one resource of its pool until it succeeds or dies."""

    pool = serializers.CharField(source="pool.name", read_only=True)
    policy = serializers.CharField(source="policy.name", read_only=True)
    payload = MaskedJson(read_only=True, help_text="What the flow works on; the values of secret keys read \"******\".")
    queued = serializers.SerializerMethodField(help_text="It waits for its next attempt, which a worker will run: "
                                                         "the task is in the database, whether or not Redis answered.")
    wake_up_sent = serializers.SerializerMethodField(
        help_text="Its wake-up reached the queue; false while Redis does not answer, until the dispatcher sends it "
                  "(every 15 seconds).")

    class Meta:
        model = Task
        fields = ["id", "flow", "pool", "payload", "policy", "state", "queued", "wake_up_sent", "strict",
                  "requested_resource", "resource", "attempt_count", "next_run_at", "deadline_at", "created_by",
                  "created_at", "finished_at", "last_error", "last_error_signature", "last_error_category"]
        read_only_fields = fields

    def get_queued(self, task) -> bool:
        return task.state in WAITING_STATES

    def get_wake_up_sent(self, task) -> bool:
        return bool(task.rq_job_id)


AS_NEW_INSTANCE = ("true: a business instance that succeeded already runs again as a new one, with an idempotency key "
                   "of its own, so its upstream runs it again (instead of 409 instance_succeeded); a live run of it is "
                   "still refused (task_live). Default false.")


class RetrySerializer(Input):
    flow = Text(max_length=100, required=False, help_text="Default: the flow of the last task that ran on it "
                                                          "(needed with strict false).")
    payload = JsonObject(required=False, help_text="Default: that task's payload (with its flow), else {}.")
    policy = Text(max_length=100, required=False, help_text="A retry policy's name. Default: that task's, else "
                                                            "the default policy.")
    strict = Flag(default=True, help_text="true (the default): reset the resource if it failed and run only on it, "
                                          "or answer 409 saying why not; false: start a task that asks for it but may "
                                          "run on another resource of the pool (the resource is not reset).")
    as_new_instance = Flag(default=False, help_text=AS_NEW_INSTANCE)


class HistoryEntrySerializer(serializers.Serializer):
    time = serializers.DateTimeField(help_text="When the attempt started, or the event happened.")
    kind = serializers.CharField(help_text="attempt, or a timeline event: claimed, released_success, "
                                           "released_failure, held_for_retry, reset, quarantined, lease_expired, ...")
    outcome = serializers.CharField(allow_null=True, help_text="An attempt's: running, succeeded, failed, abandoned; "
                                                               "an event's: success, failure, or null.")
    error = serializers.CharField(allow_blank=True)
    signature = serializers.CharField(allow_blank=True, help_text="The error with its varying parts stripped.")
    category = serializers.CharField(allow_blank=True, help_text="retryable, non_retryable, or empty.")
    task = serializers.IntegerField(allow_null=True, help_text="The task it belongs to, if any.")
    actor = serializers.CharField(allow_blank=True, help_text="Who or what did it: a task, an operator, api:<client>.")
    attempt_number = serializers.IntegerField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    details = MaskedJson()


class LastFailureSerializer(serializers.Serializer):
    at = serializers.DateTimeField(source="last_failure_at")
    reason = serializers.CharField(source="last_failure_reason")
    category = serializers.CharField(source="last_failure_category", allow_blank=True)
    signature = serializers.CharField(source="last_failure_signature", allow_blank=True)


class TotalsSerializer(serializers.Serializer):
    """The resource's counters, kept with every use (not counted from the history)."""

    successes = serializers.IntegerField(source="success_count")
    failures = serializers.IntegerField(source="failure_count")
    consecutive_failures = serializers.IntegerField()
    last_failure = serializers.SerializerMethodField()
    last_success_at = serializers.DateTimeField(allow_null=True)
    state = serializers.CharField()

    @extend_schema_field(LastFailureSerializer(allow_null=True))
    def get_last_failure(self, resource):
        return LastFailureSerializer(resource).data if resource.last_failure_at else None


class HistoryResourceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    pool = serializers.CharField()
    key = serializers.CharField()


class RetryHistorySerializer(serializers.Serializer):
    """The shape of a retry history page (the view renders it without a serializer per entry)."""

    totals = TotalsSerializer()
    resource = HistoryResourceSerializer()
    next = serializers.CharField(allow_null=True, help_text="The next (older) page's URL; null on the last page.")
    results = HistoryEntrySerializer(many=True)
