"""The feature flag `dlq-inspector` on the compensation app's interfaces: off, the dead-letter
queue's admin pages and its inspection and clean-up commands are turned off. It hides the
inspector only: the dead-letter consumer, the retention clean-up and escalation keep running,
because turning a page off must never lose a dead letter or a page to the on-call."""

from django.core.management.base import CommandError
from django.utils.translation import gettext as _

from compensation.errors import CompensationError
from retryops import flags


class FeatureOff(CompensationError):
    """An interface whose feature flag is off; details: `flag`, `setting`."""

    code = "feature_off"


def require_dlq_inspector() -> None:
    """Raise FeatureOff, naming the flag and the variable that turned it off, unless it is on."""
    if not flags.enabled(flags.DLQ_INSPECTOR):
        raise FeatureOff(
            _("the dead-letter queue inspector is turned off: the feature flag %(flag)r is listed in %(setting)s; "
              "remove it from there to use the DLQ pages and commands") % {
                "flag": flags.DLQ_INSPECTOR, "setting": flags.ENV_VAR},
            flag=flags.DLQ_INSPECTOR, setting=flags.ENV_VAR)


def command_requires_dlq_inspector() -> None:
    """require_dlq_inspector for a management command: the same sentence as a CommandError, so
    the command exits non-zero before it reads or changes anything."""
    try:
        require_dlq_inspector()
    except FeatureOff as exc:
        raise CommandError(f"{exc} [{exc.code}]") from None
