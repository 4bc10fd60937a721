"""common/hub.py: a clip on disk is used as given; the seed's relative name is downloaded once from the hub."""

import socket

import numpy as np
import pytest
from g1_clips import walking_qpos
from hub_server import HubServer

from collector.envs.g1.motion import clip_from_qpos, load_clip, write_clip
from common.config import load_config
from common.hub import MOTIONS_REPO, SEED_MOTION_FILE, HubError, motion_clip, resolve_motion_file


@pytest.fixture
def clip_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("clip") / "walk.npz"
    write_clip(path, clip_from_qpos(walking_qpos(30)))
    return path.read_bytes()


def _file_requests(hub: HubServer) -> list[tuple[str, str]]:
    return [r for r in hub.requests if "/resolve/" in r[1]]


def test_the_seed_name_is_downloaded_once_into_the_asset_folder(tmp_path, clip_bytes, monkeypatch):
    """The seed's clip name, absent locally, comes from the dataset byte for byte, loads, and is not fetched again."""
    with HubServer(MOTIONS_REPO, {SEED_MOTION_FILE: clip_bytes}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        got = resolve_motion_file(SEED_MOTION_FILE, tmp_path / "assets")
        assert got == tmp_path / "assets" / SEED_MOTION_FILE and got.read_bytes() == clip_bytes
        assert load_clip(got).joint_pos.shape == (30, 29)
        fetched = len(_file_requests(hub))
        assert ("GET", f"/datasets/{MOTIONS_REPO}/resolve/main/{SEED_MOTION_FILE}") in hub.requests
        assert resolve_motion_file(SEED_MOTION_FILE, tmp_path / "assets") == got
        assert len(_file_requests(hub)) == fetched  # found in the folder: the hub is not asked again


def test_a_path_on_disk_needs_no_hub_and_a_missing_absolute_path_is_refused(tmp_path, clip_bytes, monkeypatch):
    """An existing file is returned as given without a request; an absolute path that does not exist names itself."""
    local = tmp_path / "mine.npz"
    local.write_bytes(clip_bytes)
    with HubServer(MOTIONS_REPO, {}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert resolve_motion_file(str(local), tmp_path / "assets") == local
        with pytest.raises(HubError, match=r"task_options\.motion_file: .*gone\.npz: no such file"):
            resolve_motion_file(str(tmp_path / "gone.npz"), tmp_path / "assets")
        assert _file_requests(hub) == []


def test_a_file_the_dataset_lacks_is_refused_naming_file_dataset_and_endpoint(tmp_path, monkeypatch):
    """A 404 from the hub: HubError naming the file, the dataset and the endpoint; no file is left at the path."""
    with HubServer(MOTIONS_REPO, {}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(HubError) as err:
            resolve_motion_file("motions/g1/typo.npz", tmp_path / "assets")
    message = str(err.value)
    assert "motions/g1/typo.npz" in message and MOTIONS_REPO in message and hub.url in message
    assert "the dataset has no file motions/g1/typo.npz" in message and "task_options.motion_file=" in message
    assert not (tmp_path / "assets" / "motions" / "g1" / "typo.npz").exists()


def test_an_unreachable_hub_is_an_error_naming_it(tmp_path, monkeypatch):
    """Nothing listens at HF_ENDPOINT: HubError saying the hub cannot be reached, and no clip file appears."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the download: a refused connection
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    # huggingface_hub retries a refused connection 5 times, backing off 23 s in all: the retries still run, unslept.
    import huggingface_hub.utils._http as hf_http

    monkeypatch.setattr(hf_http.time, "sleep", lambda s: None)
    with pytest.raises(HubError, match=rf"127\.0\.0\.1:{port}.*cannot be reached"):
        resolve_motion_file(SEED_MOTION_FILE, tmp_path / "assets")
    assert not (tmp_path / "assets" / SEED_MOTION_FILE).exists()


def test_the_config_defaults_to_the_seed_clip_under_its_asset_folder(tmp_path, clip_bytes, monkeypatch):
    """g1_motion_tracking without a clip takes the seed's name; motion_clip resolves it under assets_dir; other
    tasks have none."""
    cfg = load_config(["task=g1_motion_tracking", f"task_options.assets_dir={tmp_path}"], environ={})
    assert cfg.task_options.motion_file == SEED_MOTION_FILE
    (tmp_path / SEED_MOTION_FILE).parent.mkdir(parents=True)
    (tmp_path / SEED_MOTION_FILE).write_bytes(clip_bytes)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # never asked: the clip is in the folder
    assert motion_clip(cfg) == str(tmp_path / SEED_MOTION_FILE)
    assert np.array_equal(load_clip(motion_clip(cfg)).joint_pos, load_clip(tmp_path / SEED_MOTION_FILE).joint_pos)
    assert motion_clip(load_config(["task=go2_joystick_flat"], environ={})) is None
