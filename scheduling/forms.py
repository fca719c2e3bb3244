"""The operator console's forms for tasks: they parse what an operator typed and show a service's
refusal on the field it names. What may run, where and when is the services' decision."""

import json
import re
import uuid

from django import forms
from django.core.validators import ProhibitNullCharactersValidator
from django.utils.translation import gettext_lazy as _

from resources.models import Resource, ResourcePool
from resources.selectors import get_resource
from retryops.errors import DomainError
from retryops.masking import mask_secrets
from scheduling.errors import BadPayload
from scheduling.flows import known_flows
from scheduling.models import RetryPolicy, Task
from scheduling.services import parse_payload

_TOKEN = re.compile(r"[0-9a-f]{32}")
_NUL_IN_PAYLOAD = _("payload contains a NUL character (\\u0000), which PostgreSQL cannot store")


def new_token() -> str:
    """One per rendered form: submitting the same page twice starts one task, not two."""
    return uuid.uuid4().hex


def shown_payload(payload) -> str:
    return json.dumps(payload or {}, indent=2, ensure_ascii=False, sort_keys=True)


class RetryResourceForm(forms.Form):
    """"Retry this resource" (strict: scheduling.services.retry_resource) and "run a flow with a
    specified resource" (not strict: start_task naming the resource). Opened for a resource, its
    pool and key are shown and cannot be changed; opened empty, the operator picks both."""

    pool = forms.ModelChoiceField(label=_("Pool"), queryset=ResourcePool.objects.order_by("name"))
    key = forms.CharField(label=_("Key"), max_length=Resource._meta.get_field("key").max_length,
                          widget=forms.TextInput(attrs={"list": "retry-keys", "autocomplete": "off", "size": 40}))
    flow = forms.ChoiceField(label=_("Flow"))
    payload = forms.CharField(
        label=_("Payload"), required=False, strip=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "spellcheck": "false"}),
        help_text=_("A JSON object; empty means {}."))
    policy = forms.ModelChoiceField(
        label=_("Retry policy"), queryset=RetryPolicy.objects.order_by("name"), to_field_name="name", required=False,
        empty_label=_("the default policy"))
    strict = forms.BooleanField(
        label=_("Strict mode"), required=False, initial=True,
        help_text=_("Checked: reset the resource if it failed and run only on it; if it cannot be had, nothing "
                    "starts and the reason is shown. Unchecked: start a task that asks for this resource but may "
                    "run on another one of the pool when it cannot be had (the resource is not reset)."))
    as_new_instance = forms.BooleanField(
        label=_("Run it again as a new instance"), required=False, initial=False,
        help_text=_("Checked: if a run of this flow and payload (its business instance: an order, say) has succeeded "
                    "already, run it once more as a new instance, with its own idempotency key, so that the upstream "
                    "does it again; unchecked, such a retry is refused. A run that is still live is never doubled."))
    token = forms.CharField(widget=forms.HiddenInput)

    # The task whose payload the page left out (the retry would have refused it when the page was
    # rendered), or empty: what an empty payload means is what the page said, not what the state
    # says now (a live run that ended meanwhile would make it {}).
    left_out = forms.ModelChoiceField(
        queryset=Task.objects.all(), required=False, widget=forms.HiddenInput,
        error_messages={"invalid_choice": _("the form's record of the payload it left out is damaged: reload the "
                                            "page")})

    def __init__(self, *args, resource: Resource | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.resource = resource
        if self.payload_left_out:
            self.fields["payload"].help_text = _("A JSON object: the payload of a new run. Left empty with “%(choice)s” "
                                                 "ticked: the one left out, once more.") % {
                "choice": self.fields["as_new_instance"].label}
        if resource is not None:
            # Disabled fields take their values from `initial`, whatever is posted: the resource
            # the page was opened for is the one retried.
            self.fields["pool"].disabled = self.fields["key"].disabled = True
        flows = known_flows()
        chosen = self.initial.get("flow")
        if chosen and chosen not in flows:
            flows.append(chosen)  # a flow since unregistered stays visible; the service names the problem
        self.fields["flow"].choices = [(name, name) for name in flows]
        for validator in self.fields["payload"].validators:
            if isinstance(validator, ProhibitNullCharactersValidator):
                validator.message = _NUL_IN_PAYLOAD

    @property
    def payload_left_out(self) -> bool:
        """Whether the page, as rendered, left the source's payload out: the posted marker once
        submitted."""
        return bool(self["left_out"].value())

    def clean_payload(self) -> dict | None:
        """The payload typed; None when left empty (clean says whether that is {} or the one left out)."""
        text = self.cleaned_data.get("payload") or ""
        if not text.strip():
            return None
        try:
            return parse_payload(text)
        except BadPayload as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_token(self) -> str:
        token = self.cleaned_data.get("token", "")
        if not _TOKEN.fullmatch(token):
            raise forms.ValidationError(_("the form's token is damaged: reload the page"))
        return token

    def clean(self):
        data = super().clean()
        if "payload" in data and data["payload"] is None:
            # Left empty: {} where the page showed a payload (it said "empty means {}"); the one it
            # left out where it carries one, whatever the retry would refuse now, so a live run
            # that ended meanwhile never turns it into {}. A damaged marker is an error of its own.
            if "left_out" in data and data["left_out"] is None:
                data["payload"] = {}
            elif data.get("left_out") is not None and not data.get("as_new_instance"):
                self.add_error("payload", _("type the payload to run, or tick “%(choice)s” to run the one left out "
                                            "once more (see above why it is left out)") % {
                    "choice": self.fields["as_new_instance"].label})
        if self.resource is None and data.get("pool") is not None and data.get("key"):
            try:
                self.resource = get_resource(pool=data["pool"], key=data["key"])
            except DomainError as exc:
                self.add_error("key", str(exc))
        return data

    def add_refusal(self, error: DomainError) -> None:
        """Show a service's refusal on the field it names, else above the form."""
        field = error.details.get("field")
        if str(error.details.get("path", "")).startswith("payload"):
            field = "payload"
        elif error.code == "unknown_flow":
            field = "flow"
        elif error.code in ("unknown_policy", "bad_policy"):
            field = "policy"
        elif error.code == "instance_succeeded":
            field = "as_new_instance"  # the choice that would let it start
        self.add_error(field if field in self.fields else None, str(error))


def retry_initial(*, resource: Resource | None, source: Task | None, pool: ResourcePool | None = None,
                  with_payload: bool = True) -> dict:
    """What the form starts with: the resource's pool and key, and the flow, payload and policy of
    `source` (the task the page was opened from, or the last one that ran on the resource); its
    payload only `with_payload` (not when the retry would refuse it: the page says why instead, and
    carries the source as the one it left out)."""
    initial = {"strict": True, "token": new_token(), "payload": "{}"}
    if resource is not None:
        initial.update(pool=resource.pool_id, key=resource.key)
    elif pool is not None:
        initial["pool"] = pool.pk
    if source is not None:
        # Masked: the page never holds a secret; the view puts the source's back (keep_masked_secrets).
        initial.update(flow=source.flow, payload=shown_payload(mask_secrets(source.payload)) if with_payload else "",
                       policy=source.policy.name, left_out=None if with_payload else source.pk)
    return initial


class TaskActionForm(forms.Form):
    """The confirmation of cancel or run now; a cancellation may say why."""

    reason = forms.CharField(label=_("Reason"), required=False, max_length=1000,
                             widget=forms.Textarea(attrs={"rows": 2, "cols": 60}))
