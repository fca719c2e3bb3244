"""How the console's lists show times."""

from datetime import timedelta

from django.utils import timezone

from retryops.display import short_time


def test_a_time_today_shows_the_time_alone_with_the_full_date_on_hover(settings):
    moment = timezone.localtime().replace(hour=9, minute=21, second=5, microsecond=0)

    shown = short_time(moment)

    assert ">09:21:05</time>" in shown
    assert f'datetime="{moment.isoformat()}"' in shown
    assert f'title="{moment:%b}' in shown  # the full date format names the month


def test_a_time_of_an_earlier_day_this_year_shows_the_day_and_time():
    now = timezone.localtime()
    moment = now - timedelta(days=1) if now.timetuple().tm_yday > 1 else now + timedelta(days=1)

    assert f">{moment:%m-%d %H:%M}</time>" in short_time(moment)


def test_a_time_of_another_year_shows_its_date():
    moment = timezone.localtime() - timedelta(days=400)

    assert f">{moment:%Y-%m-%d}</time>" in short_time(moment)


def test_no_time_shows_a_dash():
    assert short_time(None) == "-"
