"""What the compensation endpoints take and answer. Input serializers only parse (types, lengths,
which fields may be sent); what a value may do is the services' decision."""

from django.core.validators import RegexValidator
from rest_framework import serializers

from compensation.models import BulkReplay, DeadLetter
from compensation.runbooks.catalog import TOKEN
from compensation.runbooks.models import RunbookRun
from compensation.services.bulk_replay import DEFAULT_RATE, MAX_RATE, MIN_RATE
from compensation.work_orders.models import WorkOrder
from retryops.api.fields import Flag, Input, JsonObject, MaskedJson, Text
from retryops.api.schema import NOT_BLANK
from retryops.inputs import MAX_ID

# Free text an operator types: the services' limits.
REASON, NOTES, NAME = 2000, 20000, 200


class NoBodySerializer(Input):
    """No body, or an empty object."""


class DeadLetterSerializer(serializers.ModelSerializer):
    """A task that died, kept for an operator to replay, resolve or discard."""

    pool = serializers.CharField(source="pool.name", read_only=True)
    resource_key = serializers.CharField(source="resource.key", read_only=True, allow_null=True,
                                         help_text="Null once the resource was removed.")

    class Meta:
        model = DeadLetter
        fields = ["id", "state", "task", "flow", "pool", "resource", "resource_key", "last_error", "error_signature",
                  "error_category", "attempt_count", "died_at", "work_order", "replay_task", "replay_count",
                  "settled_at", "created_at", "updated_at"]
        read_only_fields = fields


class DeadLetterDetailSerializer(DeadLetterSerializer):
    """A dead letter with the payload its task ran with, which a replay runs again."""

    payload = MaskedJson(source="task.payload", read_only=True)

    class Meta(DeadLetterSerializer.Meta):
        fields = [*DeadLetterSerializer.Meta.fields, "payload"]
        read_only_fields = fields


class ReplaySerializer(Input):
    any_resource = Flag(default=False, help_text="false (the default): on its own resource, strictly, reset if it "
                                                 "failed (409 replay_refused, with the reason, when it is quarantined, "
                                                 "consumed, removed or in use); true: on any resource of its pool.")
    reason = Text(allow_blank=True, default="", max_length=REASON, help_text="Why, for the audit log.")


class SettleSerializer(Input):
    reason = Text(allow_blank=True, default="", max_length=REASON, help_text="Why, for the audit log.")


class RequiredReasonSerializer(Input):
    reason = Text(max_length=REASON, help_text="Why (required).")


class BulkFilterSerializer(Input):
    """Which open dead letters: those matching every field given (none: all of them). The same
    names as the dead-letter list's filters."""

    flow = Text(required=False, allow_blank=True, max_length=500)
    error_signature = Text(required=False, allow_blank=True, max_length=500)
    pool = Text(required=False, allow_blank=True, help_text="The pool's name.")
    resource = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ID, help_text="A resource's id.")
    died_after = Text(required=False, allow_blank=True, help_text="Died at this time or later (ISO 8601 with a "
                                                                  "time zone).")
    died_before = Text(required=False, allow_blank=True, help_text="Died before this time (ISO 8601 with a time "
                                                                   "zone).")

    def unknown_field(self, name):
        return f"not a filter: use {', '.join(self.fields)}"

    # The times are parsed by the service (compensation.services.bulk_replay.parse_filter); empty
    # is no bound.
    body_rules = {"properties": {name: {"anyOf": [{"format": "date-time"}, {"maxLength": 0}]}
                                 for name in ("died_after", "died_before")}}


class BulkReplayRequestSerializer(Input):
    filter = BulkFilterSerializer(required=False, default=dict)
    dry_run = Flag(default=True, help_text="true (the default): only count the open dead letters it would replay "
                                           "now; nothing is started. false: start the bulk replay.")
    rate = serializers.FloatField(required=False, min_value=MIN_RATE, max_value=MAX_RATE,
                                  help_text=f"Replays per second at most ({MIN_RATE} to {MAX_RATE}); default: "
                                            f"{DEFAULT_RATE}.")
    any_resource = Flag(default=False, help_text="Replay each on any resource of its pool, not strictly on its own.")
    all = Flag(default=False, help_text="true: an empty filter replays every open dead letter; without it an empty "
                                        "filter is refused (400 on filter). A dry run counts them either way.")

    # An empty filter (no field, or only empty ones) is taken in a dry run, or with all (the service's rule).
    body_rules = {"anyOf": [
        {"properties": {"dry_run": {"const": True}}},
        {"required": ["all"], "properties": {"all": {"const": True}}},
        {"required": ["filter"], "properties": {"filter": {"anyOf": [
            {"required": [name], "properties": {name: {"pattern": NOT_BLANK}}} if name != "resource" else
            {"required": [name]} for name in BulkFilterSerializer().fields]}}},
    ]}


class BulkReplayCountSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField(help_text="Always true: nothing was started.")
    count = serializers.IntegerField(help_text="The open dead letters a bulk replay with this filter would replay now.")


class BulkReplaySerializer(serializers.ModelSerializer):
    """A bulk replay and its progress: `selected` when it started, `done` replays started, `refused`
    dead letters that refused (their last error in last_error)."""

    filter = serializers.DictField(read_only=True, help_text="The filter in its canonical form: pool and resource "
                                                             "as ids, times in ISO 8601.")

    class Meta:
        model = BulkReplay
        fields = ["id", "state", "filter", "rate", "any_resource", "requested_by", "selected", "done", "refused",
                  "last_dead_letter_id", "last_error", "heartbeat_at", "created_at", "finished_at"]
        read_only_fields = fields


class WorkOrderSerializer(serializers.ModelSerializer):
    """What an operator has to compensate: a group of dead letters of one flow and error signature,
    or a case opened by hand."""

    pool = serializers.CharField(source="pool.name", read_only=True, allow_null=True)

    class Meta:
        model = WorkOrder
        fields = ["id", "title", "state", "source", "flow", "error_signature", "pool", "assignee", "runbook", "notes",
                  "resolution", "opened_by", "dead_letter_count", "first_dead_at", "last_dead_at", "created_at",
                  "acknowledged_at", "started_at", "compensated_at", "ended_at", "notice_breached_at",
                  "acknowledge_breached_at", "compensate_breached_at", "updated_at"]
        read_only_fields = fields


class SlaClockSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="notice (dead letter -> opened), acknowledge or compensate.")
    started_at = serializers.DateTimeField(help_text="Its first dead letter's death, or its opening if opened by hand.")
    stopped_at = serializers.DateTimeField(allow_null=True, help_text="When the step was taken; null while it runs.")
    seconds = serializers.FloatField(allow_null=True, help_text="Until the step, or until now while it runs.")
    limit = serializers.IntegerField(help_text="Its limit in seconds (RETRYOPS_SLA_<CLOCK>_SECONDS).")
    breached = serializers.BooleanField()
    marked_at = serializers.DateTimeField(allow_null=True, help_text="When escalation marked its breach.")


class WorkOrderDetailSerializer(WorkOrderSerializer):
    """A work order with its SLA clocks and how many of its dead letters are in each state."""

    sla = SlaClockSerializer(many=True, read_only=True, source="sla_clocks")
    dead_letter_states = serializers.DictField(child=serializers.IntegerField(), read_only=True)

    class Meta(WorkOrderSerializer.Meta):
        fields = [*WorkOrderSerializer.Meta.fields, "sla", "dead_letter_states"]
        read_only_fields = fields


class WorkOrderOpenSerializer(Input):
    title = Text(max_length=300, help_text="What is to be compensated.")
    flow = Text(required=False, allow_blank=True, max_length=100)
    pool = Text(required=False, help_text="The pool's name.")
    runbook = Text(required=False, allow_blank=True, max_length=NAME, help_text="The runbook to follow, by name.")
    notes = Text(required=False, allow_blank=True, max_length=NOTES)
    assignee = Text(required=False, allow_blank=True, max_length=NAME, help_text="Who has it.")


class WorkOrderPatchSerializer(Input):
    """assignee, runbook, notes and the resolution drafted, editable on a live work order; any other
    field is refused by name (its state changes through the transitions, the rest is the services')."""

    assignee = Text(required=False, allow_blank=True, max_length=NAME, help_text="Who has it; empty: nobody.")
    runbook = Text(required=False, allow_blank=True, max_length=NAME)
    notes = Text(required=False, allow_blank=True, max_length=NOTES)
    resolution = Text(required=False, allow_blank=True, max_length=NOTES)

    def unknown_field(self, name):
        if name == "state":
            return ("changes through the work order's transitions: POST .../acknowledge, start, compensate, close "
                    "or cancel")
        if name in WorkOrderSerializer.Meta.fields:
            return "written by the services only"
        return "not a field of a work order"


class StartSerializer(Input):
    runbook = Text(required=False, max_length=NAME, help_text="The runbook followed; default: unchanged.")


class CompensateSerializer(Input):
    resolution = Text(max_length=NOTES, help_text="How the business effects were repaired (required).")


class CloseSerializer(Input):
    resolution = Text(required=False, allow_blank=True, default="", max_length=NOTES,
                      help_text="Why nothing (more) is to be compensated.")


class RunbookRunSerializer(serializers.ModelSerializer):
    """A request to run a runbook action for a work order, and its outcome."""

    result = MaskedJson(read_only=True, help_text="What the action answered (null until it ran).")
    input = MaskedJson(read_only=True)

    class Meta:
        model = RunbookRun
        fields = ["id", "work_order", "runbook", "action", "external", "input", "token", "state", "requested_by",
                  "requester_identity", "requested_at", "approved_by", "approver_identity", "approved_at", "rejected_by", "rejected_at", "reject_reason",
                  "run_by", "started_at", "finished_at", "result", "error"]
        read_only_fields = fields


class RunbookRequestSerializer(Input):
    runbook = Text(max_length=100, help_text="The runbook, by name.")
    action = Text(max_length=100, help_text="One of its actions, by name.")
    input = JsonObject(required=False, default=dict, help_text="The action's input, checked against its schema.")
    token = Text(required=False, max_length=100, validators=[RegexValidator(TOKEN)],
                 help_text="Names this request: the same token again answers the first run with 200, creating "
                           "nothing (1 to 100 letters, digits or ._:@/+=-); default: a new one.")
