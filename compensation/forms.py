"""The operator console's forms for dead letters, work orders and runbook runs: they parse what an
operator typed and show a service's refusal on the field it names. What may change, and when, is
the services' decision."""

from django import forms
from django.utils.translation import gettext_lazy as _

from retryops.errors import DomainError


class ConsoleForm(forms.Form):
    def add_refusal(self, error: DomainError) -> None:
        """Show a service's refusal on the field it names ("filter.pool" is the pool field; a pool not
        found names no field), else above the form."""
        field = str(error.details.get("field") or ("pool" if "pool" in error.details else "")).removeprefix("filter.")
        self.add_error(field if field in self.fields else None, str(error))


def _text_field(label, *, required: bool, help_text=""):
    return forms.CharField(label=label, required=required, help_text=help_text,
                           widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))


class ReasonForm(ConsoleForm):
    """Why: required to discard or resolve dead letters and to reject a runbook run; it goes into
    the audit entry of each."""

    reason = _text_field(_("Reason"), required=True, help_text=_("Kept in the audit log with who did it."))


class ReplayForm(ConsoleForm):
    """Replaying one dead letter: where, and optionally why."""

    any_resource = forms.BooleanField(
        label=_("On any resource of the pool"), required=False,
        help_text=_("Unchecked: strictly on its own resource (reset first if it failed); if that resource cannot "
                    "be had, nothing starts and the reason is shown."))
    reason = _text_field(_("Reason"), required=False)


class WorkOrderTransitionForm(ConsoleForm):
    """The confirmation of one work-order transition, with the text it takes (`takes`). Whether it
    may be empty is the services' rule (compensate needs a resolution, cancel a reason): their
    refusal lands on the field."""

    resolution = _text_field(_("Resolution"), required=False,
                             help_text=_("How the business effects were repaired, or why nothing was needed."))
    reason = _text_field(_("Reason"), required=False, help_text=_("Why it was opened by mistake."))

    def __init__(self, *args, takes: tuple[str, ...], **kwargs):
        super().__init__(*args, **kwargs)
        for name in list(self.fields):
            if name not in takes:
                del self.fields[name]
