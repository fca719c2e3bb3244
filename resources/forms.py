"""The console's forms for pools and resources: they parse what an operator typed; the services
decide what it may change."""

import json

from django import forms
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources.models import Resource
from resources.services import MAX_REASON_LENGTH
from retryops.errors import BadInput
from retryops.jsonsafe import UnstorableValue, check_text, refuse_unstorable, storable_text
from retryops.masking import keep_masked_secrets, mask_secrets


class StorableJSONField(forms.JSONField):
    """forms.JSONField that answers JSON it cannot read or show back with a field error instead of
    a server error: nesting past Python's recursion limit (json.loads raises RecursionError, which
    Django does not catch), a number of more digits than int() reads (a ValueError that is no
    JSONDecodeError, which is all Django catches), and, when the page comes back with an error, a
    lone surrogate, which Django shows as itself (ensure_ascii=False) and no UTF-8 page can hold."""

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(_("nested too deeply to store"), code="invalid") from None
        except ValueError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid",
                                        params={"value": value}) from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return InvalidJSONInput(data)

    def prepare_value(self, value):
        shown = super().prepare_value(value)
        if isinstance(value, InvalidJSONInput) or not check_text(shown):
            return shown
        return json.dumps(value, cls=self.encoder)  # escaped: \ud800, \u0000


def storable_json_object(value, *, name: str) -> dict:
    """A form's JSON field as an object PostgreSQL can store (empty: {}), or a ValidationError
    naming the place. forms.JSONField reads NaN, Infinity and \\u0000, which jsonb refuses."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        kind = gettext("a list") if isinstance(value, list) else gettext("a string") if isinstance(value, str) \
            else repr(value)
        raise forms.ValidationError(gettext("%(name)s must be a JSON object ({...}), got %(kind)s") % {
            "name": name, "kind": kind})
    try:
        return refuse_unstorable(value, name=name)
    except UnstorableValue as exc:
        raise forms.ValidationError(str(exc)) from None


def refuse_unknown_masks(value: dict, stored: dict, *, name: str) -> dict:
    """`value` if each mask in it stands for a secret stored at its place, else the refusal the
    service would raise (retryops.masking.keep_masked_secrets) as a ValidationError on the field,
    instead of a server error from save_model."""
    try:
        keep_masked_secrets(value, stored, field=name)
    except BadInput as exc:
        raise forms.ValidationError(str(exc), code=exc.code) from None
    return value


class ResourceForm(forms.ModelForm):
    class Meta:
        model = Resource
        fields = ["pool", "key", "label", "attributes"]
        field_classes = {"attributes": StorableJSONField}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            # The page (and its hidden copy of what it showed) never holds a secret; what comes
            # back masked keeps the stored secret (resources.services.change_resource).
            self.initial["attributes"] = mask_secrets(self.instance.attributes)

    def clean_attributes(self):
        attributes = storable_json_object(self.cleaned_data.get("attributes"), name="attributes")
        if self.instance.pk is None:
            return attributes
        return refuse_unknown_masks(attributes, self.instance.attributes, name="attributes")


class ResourceActionForm(forms.Form):
    """The reason an operator gives for a reset, a quarantine or a release from quarantine of the
    resources listed on the confirmation page, refused here if no column can store it."""

    reason = forms.CharField(label=_("Reason"), required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             max_length=MAX_REASON_LENGTH, validators=[storable_text])

    def __init__(self, *args, reason_required: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = reason_required
