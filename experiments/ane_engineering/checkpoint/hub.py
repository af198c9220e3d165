"""The named source `laya-multilingual`: a Hugging Face repository pinned to one commit.

The pin lives in hub_pins.json (its one home). Downloads go through huggingface_hub's `snapshot_download` with
that exact commit and only the files this harness reads (JSON and safetensors). When the hub cannot be reached
it fails at once and tells the user to pass a local directory instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.errors import HarnessError
from ..core.json_documents import NON_EMPTY_STRING, STRING, open_object, read_json

PINS_FILE = Path(__file__).with_name("hub_pins.json")
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{40}$")
# Only these are fetched: never a pickle, never code.
ALLOWED_PATTERNS = ["config.json", "tokenizer.json", "*.safetensors", "model.safetensors.index.json"]


class HubSourceError(HarnessError):
    """The named hub source cannot be resolved here; the message says what to do instead."""


# name -> the repository and the commit it is pinned to (null until a commit is verified); `note` says why.
PINS_SCHEMA = {"type": "object", "additionalProperties": open_object(
    {"repo_id": NON_EMPTY_STRING, "revision": {"type": ["string", "null"]}}, {"note": STRING})}


def read_pins() -> dict:
    return read_json(PINS_FILE, PINS_SCHEMA, HubSourceError)


def resolve_pin(name: str) -> tuple[str, str]:
    """`laya-multilingual` -> (repo_id, commit) from the pins file; `laya-multilingual@<commit>` overrides it."""
    base, _, override = name.partition("@")
    pins = read_pins()
    if base not in pins:
        raise HubSourceError(f"unknown named source {base!r}; known: {sorted(pins)}. Or pass --source DIR.")
    repo_id = pins[base]["repo_id"]
    commit = override or pins[base]["revision"]
    if not commit:
        raise HubSourceError(
            f"no commit is pinned for {base!r} (repository {repo_id}) in {PINS_FILE.name}; pass "
            f"--source {base}@<40-hex commit>, set the pin, or download it yourself and pass --source DIR.")
    if not COMMIT_PATTERN.match(commit):
        raise HubSourceError(f"{base!r} must be pinned to a full 40-hex commit, got {commit!r} "
                             "(branch and tag names move; pass --source DIR for a local copy)")
    return repo_id, commit


def download_pinned(name: str, timeout_s: float = 10.0) -> Path:
    """Fetch the pinned snapshot (or reuse the local cache of exactly that commit) and return its directory."""
    repo_id, commit = resolve_pin(name)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(int(timeout_s)))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(int(timeout_s)))
    # huggingface_hub retries a failed tree listing several times with backoff (seconds of waiting when the hub is
    # down), so reachability is checked first with one request and no retries; unreachable -> only the local cache
    # is read.
    unreachable = _unreachable(timeout_s)
    try:
        return Path(snapshot_download(repo_id=repo_id, revision=commit, allow_patterns=ALLOWED_PATTERNS,
                                      local_files_only=unreachable is not None))
    except LocalEntryNotFoundError as error:
        reason = unreachable or error
        raise HubSourceError(
            f"cannot reach the Hugging Face hub to fetch {repo_id}@{commit} and it is not in the local cache "
            f"({reason.__class__.__name__}). Pass --source DIR with a local copy of the checkpoint.") from error
    except Exception as error:  # network, auth or missing-revision errors: never guess, say what to do
        raise HubSourceError(
            f"could not fetch {repo_id}@{commit} from the Hugging Face hub: {error.__class__.__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''} "
            "Pass --source DIR with a local copy of the checkpoint.") from error


def _unreachable(timeout_s: float) -> Exception | None:
    """One request to the hub endpoint without retries: the error if it cannot be reached, else None."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return None  # snapshot_download then reads only the local cache, at once
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception as error:  # connection refused, DNS failure, timeout, TLS: the hub is not reachable from here
        return error
    return None
