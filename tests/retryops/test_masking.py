"""retryops.masking: which keys are secret, what a masked value looks like, and how a masked value
sent back keeps the stored secret."""

import pytest

from retryops.errors import BadInput
from retryops.masking import (
    MASK,
    keep_masked_secrets,
    mask_secrets,
    scrub_secret_values,
    secret_values,
)


@pytest.mark.parametrize("key", ["password", "db_password", "Passwd", "pwd", "token", "access_token", "X-Auth-Token",
                                 "client_secret", "SECRET", "cookie", "Set-Cookie", "api_key", "apikey", "X-Api-Key",
                                 "API-KEY", "Authorization", "private_key", "privateKey", "credentials"])
def test_the_default_pattern_finds_secret_keys_whatever_their_case(key):
    assert mask_secrets({key: "hunter2"}) == {key: MASK}


@pytest.mark.parametrize("key", ["db_pwd", "user_pwd", "dbPwd", "PWD_1", "passphrase", "ssh_passphrase"])
def test_the_default_pattern_finds_a_pwd_or_passphrase_inside_a_longer_key(key):
    assert mask_secrets({key: "hunter2"}) == {key: MASK}


@pytest.mark.parametrize("key", ["region", "username", "email", "passenger", "pool", "label", "key"])
def test_the_default_pattern_leaves_ordinary_keys_alone(key):
    assert mask_secrets({key: "eu"}) == {key: "eu"}


def test_secret_values_are_masked_at_any_depth_and_nothing_else_is():
    value = {"region": "eu", "password": "hunter2",
             "upstream": {"url": "https://x", "headers": {"Authorization": "Bearer abc", "Accept": "json"}},
             "accounts": [{"user": "a", "api_key": "k1"}, {"user": "b", "api_key": {"nested": "k2"}}]}
    assert mask_secrets(value) == {
        "region": "eu", "password": MASK,
        "upstream": {"url": "https://x", "headers": {"Authorization": MASK, "Accept": "json"}},
        "accounts": [{"user": "a", "api_key": MASK}, {"user": "b", "api_key": MASK}]}


def test_masking_leaves_its_input_as_it_was():
    value = {"token": "t", "inner": {"secret": "s"}}
    mask_secrets(value)
    assert value == {"token": "t", "inner": {"secret": "s"}}


def test_values_that_are_not_objects_pass_through():
    assert [mask_secrets(v) for v in (None, 3, "password", ["token"])] == [None, 3, "password", ["token"]]


def test_a_secret_sent_back_as_its_mask_keeps_the_stored_value():
    stored = {"region": "eu", "password": "hunter2", "upstream": {"token": "abc"}}
    sent = {"region": "us", "password": MASK, "upstream": {"token": MASK}}
    assert keep_masked_secrets(sent, stored, field="attributes") == {"region": "us", "password": "hunter2",
                                                                      "upstream": {"token": "abc"}}


def test_a_secret_typed_over_the_mask_replaces_the_stored_value():
    assert keep_masked_secrets({"password": "new"}, {"password": "old"}, field="attributes") == {"password": "new"}


def test_a_secret_left_out_is_removed():
    assert keep_masked_secrets({"token": "t"}, {"password": "old"}, field="attributes") == {"token": "t"}


def test_a_mask_under_a_renamed_secret_key_is_refused_naming_its_path():
    # The operator renamed password to db_password while it showed the mask: stored, the mask
    # would be the password the flows use.
    with pytest.raises(BadInput, match=r"^attributes\.db_password shows the mask \*{6} but no secret is stored for "
                                       r"it: type the secret$") as refused:
        keep_masked_secrets({"db_password": MASK}, {"password": "old"}, field="attributes")
    assert refused.value.code == "masked_secret_unknown"
    assert refused.value.details == {"field": "attributes", "path": "attributes.db_password"}


def test_a_mask_in_a_new_list_entry_is_refused_naming_the_entry():
    stored = {"accounts": [{"user": "a", "password": "pa"}]}
    sent = {"accounts": [{"user": "a", "password": MASK}, {"user": "b", "password": MASK}]}
    with pytest.raises(BadInput, match=r"^payload\.accounts\[1\]\.password shows the mask"):
        keep_masked_secrets(sent, stored, field="payload")


def test_a_mask_refused_is_raised_as_the_callers_error():
    class AppBadInput(BadInput):
        pass

    with pytest.raises(AppBadInput):
        keep_masked_secrets({"api_key": MASK}, None, field="payload", error=AppBadInput)


def test_a_mask_under_an_ordinary_key_is_an_ordinary_value():
    assert keep_masked_secrets({"note": MASK}, {"note": "old"}, field="attributes") == {"note": MASK}


def test_secrets_in_lists_are_kept_by_the_entries_as_shown():
    stored = {"accounts": [{"api_key": "k1"}, {"api_key": "k2"}]}
    sent = {"accounts": [{"api_key": MASK}, {"api_key": "k3"}, {"api_key": MASK}]}
    assert keep_masked_secrets(sent, stored, field="attributes") == {
        "accounts": [{"api_key": "k1"}, {"api_key": "k3"}, {"api_key": "k2"}]}


def test_a_list_entry_edited_beside_its_mask_keeps_the_secret_at_its_place():
    stored = {"accounts": [{"user": "a", "password": "pa"}, {"user": "b", "password": "pb"}]}
    sent = {"accounts": [{"user": "a", "password": MASK}, {"user": "b2", "password": MASK}]}
    assert keep_masked_secrets(sent, stored, field="attributes") == {"accounts": [{"user": "a", "password": "pa"},
                                                                                  {"user": "b2", "password": "pb"}]}


def test_a_list_entry_removed_before_another_does_not_give_that_other_its_secret():
    stored = {"accounts": [{"user": "a", "password": "pa"}, {"user": "b", "password": "pb"}]}
    sent = {"accounts": [{"user": "b", "password": MASK}]}
    assert keep_masked_secrets(sent, stored, field="attributes") == {"accounts": [{"user": "b", "password": "pb"}]}


def test_list_entries_reordered_as_shown_keep_their_own_secrets():
    stored = {"accounts": [{"user": "a", "password": "pa"}, {"user": "b", "password": "pb"}]}
    sent = {"accounts": [{"user": "c", "password": "pc"}, {"user": "b", "password": MASK},
                         {"user": "a", "password": MASK}]}
    assert keep_masked_secrets(sent, stored, field="attributes") == {"accounts": [
        {"user": "c", "password": "pc"}, {"user": "b", "password": "pb"}, {"user": "a", "password": "pa"}]}


def test_an_entry_edited_beside_its_mask_after_a_move_keeps_its_own_secret_not_the_moved_ones():
    stored = {"accounts": [{"user": "a", "password": "pa"}, {"user": "b", "password": "pb"}]}
    sent = {"accounts": [{"user": "b", "password": MASK}, {"user": "a2", "password": MASK}]}
    assert keep_masked_secrets(sent, stored, field="attributes") == {"accounts": [
        {"user": "b", "password": "pb"}, {"user": "a2", "password": "pa"}]}


# secret values in free text (an upstream's error that echoes the request)


def test_secret_values_are_the_strings_and_long_numbers_under_secret_keys_at_any_depth():
    payload = {"region": "eu-west-1", "password": "hunter2", "pin": 1234, "upstream": {"token": "t-9"},
               "accounts": [{"user": "carol", "api_key": 48151623}], "credentials": {"user": "carol@x", "pass": "pw-42"}}
    assert sorted(secret_values(payload)) == sorted(["hunter2", "48151623", "carol@x", "pw-42"])


def test_secret_values_leave_out_values_too_short_to_find_safely_in_text():
    assert secret_values({"password": "abc", "pin": 123, "token": True, "secret": None}) == []


def test_a_secret_value_is_also_found_as_json_quotes_it():
    # http_call sends the attributes as JSON (ensure_ascii): an echo of the body quotes them so.
    assert set(secret_values({"password": 'p"\\é-1'})) == {'p"\\é-1', 'p\\"\\\\\\u00e9-1'}


def test_every_occurrence_of_a_secret_value_in_a_message_is_masked():
    secrets = secret_values({"password": "hunter2"}, {"api_token": 31415926})
    text = 'HTTP 422 from http://up/x: bad request: {"password": "hunter2", "n": 31415926, "again": "hunter2"}'
    assert scrub_secret_values(text, secrets) == (
        f'HTTP 422 from http://up/x: bad request: {{"password": "{MASK}", "n": {MASK}, "again": "{MASK}"}}')


def test_a_secret_cut_off_at_the_end_of_a_message_is_masked():
    assert scrub_secret_values('bad request: {"password": "hunter2-s3', ["hunter2-s3cr3t"]) == (
        f'bad request: {{"password": "{MASK}')


def test_a_secret_inside_a_longer_one_leaves_nothing_of_the_longer_one():
    assert scrub_secret_values("x hunter2-s3cr3t x", secret_values({"password": "hunter2", "token": "hunter2-s3cr3t"})) \
        == f"x {MASK} x"


def test_a_message_without_secret_values_is_left_as_it_is():
    text = "HTTP 503 from http://up/x: try again later"
    assert scrub_secret_values(text, secret_values({"password": "hunter2"})) is text


def test_the_longest_cut_off_secret_at_the_end_of_a_message_is_the_one_masked():
    # "ab-cdab-cd" begins the longer secret, "cdab-cdab-cd" the shorter one: nothing of either is left.
    assert scrub_secret_values("answer: cdab-cdab-cd", ["ab-cdab-cd-the-longer-one", "cdab-cdab-cdX"]) == (
        f"answer: {MASK}")


def test_a_message_ending_in_a_secrets_first_few_characters_is_left_as_it_is():
    # "pass" begins "password123", and ends "invalid pass" whether or not the text was cut.
    text = "login failed: invalid pass"
    assert scrub_secret_values(text, ["password123"]) == text


def test_a_number_is_masked_only_where_it_stands_as_a_whole_number():
    secrets = secret_values({"token_ttl": 1000})
    assert scrub_secret_values("retry in 10000 ms, not 1000 ms", secrets) == f"retry in 10000 ms, not {MASK} ms"


class CountedSlices(str):
    """A secret that counts how often a part of it is cut out, and refuses a 100th time."""

    slices = 0

    def __getitem__(self, key):
        self.slices += 1
        assert self.slices < 100, "the secret was sliced for every length"
        return super().__getitem__(key)


def test_a_megabyte_long_secret_is_looked_for_at_the_end_of_a_message_without_a_slice_per_length():
    secret = CountedSlices("hunter2-" * 131072)
    assert scrub_secret_values("bad request: hunter2-hunter2-hun", [secret]) == f"bad request: {MASK}"
