"""Hub ids and their revisions. A config pins the commit of any hub id it names in one map,
`hub_revisions: {<hub id>: <commit>}` (the hub probe writes it: `--write-pins`), which `pin_revisions`
gives to every data source and model naming that id without a `revision:` of its own. Data and models
are downloaded at those commits, and their manifests record the commit each resolved to."""

from pathlib import Path

from stages.lib.config_checks import pretrained_models
from stages.lib.settings import settings_at

LOCAL = "local"  # the revision of a directory or file: it has none


def hub_specs(config: dict) -> list[tuple[dict, str, str]]:
    """Every place the config names a hub id or a local path: (the section, its key holding the id, "dataset"
    or "model"). The sections are the config's own dicts: setting `revision` in one sets it in the config."""
    specs = [(source, "path", "dataset") for sources in settings_at(config, "data.hub.sets").values()
             for source in sources]
    return specs + [(settings_at(config, key.rsplit(".", 1)[0]), "name_or_path", "model")
                    for key in pretrained_models(config)]


def pin_revisions(config: dict) -> dict:
    """`hub_revisions` given to each source and model of a pinned id that has no `revision:` of its own (in
    place; returns the config)."""
    pins = config.get("hub_revisions") or {}
    for spec, key, _ in hub_specs(config):
        if spec[key] in pins and not spec.get("revision"):
            spec["revision"] = pins[spec[key]]
    return config


def hub_reachable(timeout_s: float = 5.0) -> bool:
    """Whether this machine reaches the hub's endpoint (HF_ENDPOINT, a mirror, is honoured), and the hub client
    is not told to stay offline."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80)),
                                 timeout=timeout_s).close()
    except OSError:
        return False
    return True


def offline_controller_problem(not_fetched: list[str]) -> str | None:
    """Why a controller cannot run: it runs in a Slurm job (a compute node), some hub downloads are not fetched
    yet (they would fail only when their turn came, after GPU jobs of other branches had started), and this
    node cannot reach the hub."""
    import os

    job = os.environ.get("SLURM_JOB_ID")
    if not job or not not_fetched or hub_reachable():
        return None
    return (f"{len(not_fetched)} hub download(s) not fetched yet ({not_fetched[0]}, ...), and this node (Slurm job "
            f"{job}) cannot reach the hub: run the same command with the target `fetch` on the login node first, "
            "then launch the controller again")


def resolved_revision(path: str, revision: str | None, kind: str) -> str:
    """The commit a hub id (at `revision`, default its main branch) resolves to now; "local" for a path here."""
    if Path(path).exists():
        return LOCAL
    from huggingface_hub import HfApi

    info = HfApi().dataset_info(path, revision=revision) if kind == "dataset" else \
        HfApi().model_info(path, revision=revision)
    return info.sha
