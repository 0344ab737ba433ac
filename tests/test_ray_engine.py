"""``pictrieve index/tile --engine ray`` against a real ``chroma run`` server and real Ray (issue 22).

Nothing of Ray or Chroma is mocked: the commands run as a user runs them, in their own processes.
One test lets the command start its own local Ray instance; the others share a two-node Ray cluster
on this machine (``ray start --head`` and a second ``ray start --address``, each with one CPU, its
own temp folder and ports), stopped by the PIDs the fixture started. Ray rewrites ``127.0.0.1`` to
the machine's network address (``resolve_ip_for_localhost``), so the nodes use ``127.0.0.2``: still
loopback. The cluster requires Ray's token, given as Ray documents it (``RAY_AUTH_MODE=token``,
``RAY_AUTH_TOKEN``).

A worker is held in the middle of a batch without any fake: the photo folder holds a named pipe
(``zz-hold.jpg``, listed last); a worker that reads it blocks until the test opens the pipe's other
end, which the test does without writing, so the worker stays in the middle of that batch while the
others finish. The test then kills the driver, or ``kill -9`` the worker found through Ray's state
API, and puts a real photo where the pipe was.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from helpers import free_ports, make_photo
from helpers.chroma import chroma_server  # noqa: F401 - a fixture

# Ray itself is imported only after `ray_env` set the token: Ray reads its authentication mode once.
pytestmark = [pytest.mark.server,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs pictrieve[scale] (Ray)")]

CLI = [sys.executable, "-m", "pictrieve.cli.main"]
NODE_IP = "127.0.0.2"
PHOTOS = 40
HOLD = "zz-hold.jpg"
INDEX_WORKER = "MapWorker(MapBatches(IndexWorker))"


def wait_for(condition, timeout: float = 120.0, what: str = "the condition"):
    """Poll ``condition`` until it returns something true (generous bound: the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"gave up waiting {timeout:.0f} s for {what}")


@pytest.fixture(scope="module")
def ray_env():
    """The environment of every Ray process the module starts: a token of our own, one thread each."""
    keys = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED", "RAY_TMPDIR")
    saved = {key: os.environ.get(key) for key in keys}
    temp = tempfile.mkdtemp(prefix="ptray-", dir="/tmp")  # a local instance's session files; short for sockets
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
                      RAY_TMPDIR=temp)
    yield dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    shutil.rmtree(temp, ignore_errors=True)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class RayNode:
    """One ``ray start --block`` process and the node's processes it starts."""

    PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
                  "--runtime-env-agent-port", "--node-manager-port", "--object-manager-port")

    def __init__(self, args: list[str], ports: Iterator[int], env: dict[str, str], log: Path) -> None:
        import psutil

        self.temp = tempfile.mkdtemp(prefix="ptray-", dir="/tmp")  # Ray's socket paths must stay short
        command = [str(Path(sys.executable).with_name("ray")), "start", *args, "--num-cpus", "1",
                   "--node-ip-address", NODE_IP, "--temp-dir", self.temp, "--disable-usage-stats",
                   "--object-store-memory", str(100 * 1024**2), "--block"]
        for flag in self.PORT_FLAGS:
            command += [flag, str(next(ports))]
        self.log = log
        self.process = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                        start_new_session=True)  # its own group: found even after it exited
        self.psutil = psutil

    def stop(self) -> None:
        """Kill the node's processes (Ray's own SIGTERM path drains for up to 30 s, which tells a test nothing):
        those found from the PID we started while it runs, and whatever is left in its process group (a node
        whose ``ray start`` exited, and was reaped, leaves its other processes there)."""
        started = []
        if self.process.poll() is None:  # asked only while it is ours: a reaped PID may be someone else's
            try:
                started = self.psutil.Process(self.process.pid).children(recursive=True)
            except self.psutil.NoSuchProcess:
                pass
        for process in started:
            try:
                process.kill()
            except self.psutil.NoSuchProcess:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)
        self.psutil.wait_procs(started, timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)


def stop_all(nodes: list[RayNode]) -> None:
    """Stop every node, the later ones first, even when stopping one of them fails (then raise its error)."""
    errors = []
    for node in reversed(nodes):
        try:
            node.stop()
        except Exception as exc:  # noqa: BLE001 - the other nodes must still be stopped
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def two_nodes(ray_env, tmp_path_factory):
    """A head and a second node, one CPU each, on this machine; yields the head's address.

    All their ports are chosen at once, distinct and outside the kernel's ephemeral range: two calls of
    ``free_port()`` once returned the same port to two of the head's components, and ``ray start`` exited."""
    logs = tmp_path_factory.mktemp("ray-logs")
    ports = iter(free_ports(3 + 2 * len(RayNode.PORT_FLAGS)))
    port, dashboard = next(ports), next(ports)
    head = RayNode(["--head", "--port", str(port), "--ray-client-server-port", str(next(ports)),
                    "--include-dashboard", "true", "--dashboard-host", NODE_IP, "--dashboard-port", str(dashboard)],
                   ports, ray_env, logs / "head.log")
    nodes = [head]
    try:
        address = f"{NODE_IP}:{port}"
        nodes.append(RayNode(["--address", address], ports, ray_env, logs / "second.log"))
        state_api = f"http://{NODE_IP}:{dashboard}"

        def both_alive():
            from ray.util.state import list_nodes

            for node in nodes:
                if node.process.poll() is not None:
                    pytest.fail(f"ray start exited ({node.log.name}): {node.log.read_text()[-2000:]}")
            try:
                return len(list_nodes(address=state_api, filters=[("state", "=", "ALIVE")], timeout=5)) == 2
            except Exception as exc:  # noqa: BLE001 - the head's state API is not up yet
                print(f"state API not ready: {exc!r}"[:300])
                return False

        wait_for(both_alive, 180, "two Ray nodes")
        yield {"address": address, "state_api": state_api}
    finally:
        stop_all(nodes)


@pytest.fixture
def photos(flickr_dir, tmp_path) -> Path:
    """40 flickr8k-dev photos (links, never copies) and their captions."""
    folder = tmp_path / "photos"
    folder.mkdir()
    names = sorted(p.name for p in (flickr_dir / "images").glob("*.jpg"))[:PHOTOS]
    for name in names:
        (folder / name).symlink_to(flickr_dir / "images" / name)
    rows = [json.loads(line) for line in (flickr_dir / "captions.jsonl").read_text().splitlines() if line.strip()]
    kept = [{"image": Path(row["image"]).name, "captions": row["captions"]} for row in rows
            if Path(row["image"]).name in set(names)]
    (folder / "captions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept))
    return folder


def index_command(folder: Path, gallery: str, embedder: str, *extra: str) -> list[str]:
    return [*CLI, "index", str(folder), "--gallery", gallery, "-e", embedder, "--json", *extra]


def run_cli(command: list[str], env: dict[str, str], timeout: float = 400) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DeprecationWarning" not in done.stderr, done.stderr[-3000:]  # pictrieve's own Ray calls are current
    return json.loads(done.stdout)


def stored_count(gallery_location: str, embedder: str) -> int:
    """Records stored so far (0 before the job has created the collection)."""
    from pictrieve.vectorstore.errors import GalleryError

    try:
        return stored(gallery_location, embedder).count()
    except GalleryError:
        return 0


def stored(gallery_location: str, embedder: str):
    from pictrieve.vectorstore.gallery import Gallery

    return Gallery.open(gallery_location, embedder, create=False)


def assert_same_as_local(remote, local) -> None:
    """Same ids, metadata and vectors (within 1e-5), and the same top 10 for text and image queries."""
    ids = sorted(local.ids())
    assert sorted(remote.ids()) == ids
    assert np.abs(remote.embeddings(ids) - local.embeddings(ids)).max() <= 1e-5
    assert [item.metadata for item in remote.get(ids)] == [item.metadata for item in local.get(ids)]
    queries = ["a dog runs on the grass", "children playing", "a man on a bike"]
    for query in queries:
        assert [hit.id for hit in remote.search_text(query, k=10)] == [hit.id for hit in local.search_text(query, k=10)]
    # a photo still on disk: ids hash the path (the test's temporary folder included), so "the first id" is a
    # different photo from run to run, and a test that moved a photo away would fail only when it came first
    picture = next(item.path for item in local.get(ids) if Path(item.path).is_file())
    assert [hit.id for hit in remote.search_image(picture, k=10)] == [
        hit.id for hit in local.search_image(picture, k=10)]


def test_a_local_ray_instance_stores_what_local_indexing_stores(photos, chroma_server, tiny_clip_name,
                                                                   tmp_path, ray_env):
    """No --ray-address: the command starts a Ray instance sized to this machine and stops it."""
    from pictrieve.vectorstore.gallery import Gallery

    local = Gallery.open(tmp_path / "local", tiny_clip_name)
    expected = local.add(photos, batch_size=8, progress=False).to_dict()
    report = run_cli(index_command(photos, chroma_server, tiny_clip_name, "--engine", "ray",
                                   "--ray-workers", "2", "--batch-size", "8"), ray_env)
    assert report == expected and report["indexed"] == PHOTOS
    assert_same_as_local(stored(chroma_server, tiny_clip_name), local)
    again = run_cli(index_command(photos, chroma_server, tiny_clip_name, "--engine", "ray"), ray_env)
    assert again == {**expected, "indexed": 0, "unchanged": PHOTOS}


def test_ray_reads_text_in_photos_and_reuses_exact_copies_as_local_indexing_does(chroma_server, tiny_clip_name,
                                                                                 tmp_path, ray_env):
    """--ocr and exact copies on a local Ray instance: the same records (photo_text included) and the same report as
    local indexing, copies within the run and copies of stored photos alike; the text is searchable by its words."""
    pytest.importorskip("rapidocr", reason="text in photos needs the 'ocr' extra: pip install -e '.[ocr]'")
    from helpers.text_pictures import screenshot, sign

    from pictrieve.vectorstore.gallery import Gallery

    first, second = tmp_path / "photos" / "first", tmp_path / "photos" / "second"
    sign(first / "sign.jpg")
    screenshot(first / "shot.png")
    make_photo(first / "plain.png", seed=1, size=(320, 240))
    shutil.copy(first / "sign.jpg", first / "sign-copy.jpg")  # copies within one run
    shutil.copy(first / "plain.png", first / "zz-plain-copy.png")
    local = Gallery.open(tmp_path / "local", tiny_clip_name)
    expected = local.add(first, progress=False, ocr=True).to_dict()
    assert (expected["indexed"], expected["copied"]) == (5, 2)
    ray_run = ["--engine", "ray", "--ray-workers", "2", "--batch-size", "1"]
    report = run_cli(index_command(first, chroma_server, tiny_clip_name, *ray_run, "--ocr"), ray_env)
    # Ray reads each content's text once (a copy takes its twin's); local indexing read the copies' text too
    assert report == {**expected, "text_read": 3}, report
    remote = stored(chroma_server, tiny_clip_name)
    assert_same_as_local(remote, local)
    assert "sunflower42" in remote.search_text("the wifi password", k=1, hybrid=True)[0].photo_text.lower()
    # later: a copy of a stored photo and a moved one reuse the stored vectors; the gallery remembers --ocr
    second.mkdir()
    shutil.copy(first / "shot.png", second / "shot-copy.png")
    os.rename(first / "plain.png", second / "moved.png")
    expected = local.add(second, progress=False).to_dict()
    assert (expected["indexed"], expected["copied"]) == (2, 2)
    assert run_cli(index_command(second, chroma_server, tiny_clip_name, *ray_run), ray_env) == expected
    assert_same_as_local(remote, local)


def test_a_ray_copy_keeps_its_own_vector_when_its_source_changes_in_the_same_run(chroma_server, tiny_clip_name,
                                                                                tmp_path, ray_env):
    """As locally (tests/test_duplicates.py): a new file holding the bytes a stored photo had, while that photo was
    replaced, must not take the photo's new vector; on Ray the photo may be re-embedded by another worker."""
    from pictrieve.vectorstore.chroma_store import path_id

    folder = tmp_path / "photos"
    make_photo(folder / "a.jpg", seed=1, size=(96, 80))
    ray_run = ["--engine", "ray", "--ray-workers", "1", "--batch-size", "2"]
    assert run_cli(index_command(folder, chroma_server, tiny_clip_name, *ray_run), ray_env)["indexed"] == 1
    remote = stored(chroma_server, tiny_clip_name)
    old_vector = remote.embeddings([path_id(folder / "a.jpg")])[0]
    shutil.copy(folder / "a.jpg", folder / "b.jpg")  # b has a's old bytes
    make_photo(folder / "a.jpg", seed=2, size=(96, 80))  # a becomes another photo
    os.utime(folder / "a.jpg", ns=(1_000_000_000, 1_000_000_000))
    assert run_cli(index_command(folder, chroma_server, tiny_clip_name, *ray_run), ray_env)["indexed"] == 2
    new_a, b = remote.embeddings([path_id(folder / "a.jpg"), path_id(folder / "b.jpg")])
    np.testing.assert_allclose(b, old_vector, atol=1e-5)  # b's own content, not a's new photo
    assert float(np.dot(new_a, old_vector)) < 0.999


def test_copies_within_a_ray_run_wait_for_their_twin(tmp_path):
    """The pool gets one file of each content; the driver stores the others after it (two workers embedding the
    same content at once would each embed it). Only files of equal size are hashed."""
    from pictrieve.vectorstore.distributed.index_job import _same_content_later
    from pictrieve.vectorstore.indexing import PlannedFile

    files = {"a.jpg": b"x" * 10, "b.jpg": b"y" * 10, "c.jpg": b"x" * 10, "d.jpg": b"x" * 11, "e.jpg": b"x" * 10}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    todo = [PlannedFile(str(tmp_path / name), name, ["e"]) for name in [*files, "gone.jpg"]]
    pooled, later = _same_content_later(todo)
    assert [p.id for p in pooled] == ["a.jpg", "b.jpg", "d.jpg", "gone.jpg"]  # an unreadable one: the pool reports it
    assert [p.id for p in later] == ["c.jpg", "e.jpg"]
    # two named pipes (same size, 0) and two empty files are left to the pool: reading a pipe here would wait forever
    odd = []
    for name in ("p1.jpg", "p2.jpg"):
        os.mkfifo(tmp_path / name)
        odd.append(PlannedFile(str(tmp_path / name), name, ["e"]))
    for name in ("empty1.jpg", "empty2.jpg"):
        (tmp_path / name).write_bytes(b"")
        odd.append(PlannedFile(str(tmp_path / name), name, ["e"]))
    split: list = []
    worker = threading.Thread(target=lambda: split.append(_same_content_later(odd)), daemon=True)
    worker.start()
    worker.join(60)
    assert split, "the driver waited on a named pipe"
    assert [p.id for p in split[0][0]] == ["p1.jpg", "p2.jpg", "empty1.jpg", "empty2.jpg"] and split[0][1] == []


def test_two_nodes_share_the_job_and_bad_files_are_reported(photos, chroma_server, tiny_clip_name, tmp_path,
                                                             two_nodes, ray_env):
    from ray.util.state import list_actors, list_tasks

    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.tiles import TileIndex, index_tiles

    # The bad files sort among the good ones, so they share batches with good photos: a worker that
    # reported such a batch without writing it would lose its good photos (the comparison below).
    middle = sorted(p.name for p in photos.glob("*.jpg"))[PHOTOS // 2]
    (photos / f"{middle[:-4]}-broken.jpg").write_bytes(b"not a jpeg at all")
    (photos / f"{middle[:-4]}-empty.jpg").write_bytes(b"")
    local = Gallery.open(tmp_path / "local", tiny_clip_name)
    expected = local.add(photos, batch_size=4, progress=False).to_dict()
    assert len(expected["failed"]) == 2
    # Ray Data waits for both workers to be up before the first batch (not its default, which starts them
    # asynchronously): on a loaded machine the second node's worker was still starting when the first had
    # taken every batch, so "both nodes ran the job's workers" below failed now and then.
    waiting = {**ray_env, "RAY_DATA_DEFAULT_WAIT_FOR_MIN_ACTORS_S": "600"}
    report = run_cli(index_command(photos, chroma_server, tiny_clip_name, "--engine", "ray", "--ray-address",
                                   two_nodes["address"], "--ray-workers", "2", "--batch-size", "4"), waiting)
    assert report == expected  # the same counts, and the bad files with the same reasons
    remote = stored(chroma_server, tiny_clip_name)
    assert_same_as_local(remote, local)

    workers = list_actors(address=two_nodes["state_api"], filters=[("class_name", "=", INDEX_WORKER)], detail=True)
    assert len({actor.node_id for actor in workers}) == 2, workers

    ours = {actor.actor_id for actor in workers}
    seen: list = []

    # Both nodes ran tasks of the job's workers, and batches finished. Which node's worker takes how many
    # batches is Ray Data's choice: with 10 small batches one worker may take them all before the other is
    # warm (seen in CI), so requiring batches on both nodes would make this test flaky.
    def tasks_on_both_nodes():  # task events reach the state API a moment after the tasks end
        tasks = list_tasks(address=two_nodes["state_api"], detail=True, limit=10_000)
        seen[:] = [(task.name, task.state, task.node_id) for task in tasks if task.actor_id in ours]
        finished = [(name, node) for name, state, node in seen if state == "FINISHED" and node]
        return (len({node for _, node in finished}) == 2
                and any(name.endswith(".submit") for name, _ in finished))

    if not any(tasks_on_both_nodes() or time.sleep(1) for _ in range(60)):
        pytest.fail(f"the state API does not show the workers' tasks finished on both nodes: {seen}")

    # NEEDLE's tiles on the same cluster: the same tile records as local tiling
    tiled = subprocess.run([*CLI, "tile", "--gallery", chroma_server, "--engine", "ray", "--ray-address",
                            two_nodes["address"], "--ray-workers", "2", "--batch-size", "8"],
                           capture_output=True, text=True, env=ray_env, timeout=400)
    assert tiled.returncode == 0, tiled.stderr[-3000:]
    local_report = index_tiles(local, progress=False)
    assert f"tiled {PHOTOS} images into {local_report.tiles[tiny_clip_name]} tiles" in tiled.stdout
    ours, theirs = TileIndex(remote).collection(), TileIndex(local).collection()
    mine, reference = (c.get(include=["embeddings", "metadatas"]) for c in (ours, theirs))
    order = np.argsort(mine["ids"]), np.argsort(reference["ids"])
    assert sorted(mine["ids"]) == sorted(reference["ids"])
    difference = np.asarray(mine["embeddings"])[order[0]] - np.asarray(reference["embeddings"])[order[1]]
    assert np.abs(difference).max() <= 1e-5


def hold_a_worker(folder: Path) -> Path:
    """Add the named pipe that holds the worker reading it (see the module docstring)."""
    pipe = folder / HOLD
    os.mkfifo(pipe)
    return pipe


def open_when_read(pipe: Path, driver: subprocess.Popen) -> int:
    """Wait until a worker opens ``pipe`` for reading; return our (writing) end, kept open so it waits on."""
    def opened():
        if driver.poll() is not None:
            pytest.fail(f"the job ended before reaching the pipe: {driver.stderr.read()[-3000:]}")
        try:
            return os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: nobody reads it yet
                raise
            return None

    return wait_for(opened, 240, "a Ray worker to read the pipe")


@pytest.fixture
def start_job():
    """Starts an index job on the cluster in the background; a job still running when the test ends (a wait that
    failed) is killed, so that it does not hold the cluster's only two CPUs through the tests after it."""
    drivers: list[subprocess.Popen] = []

    def start(photos: Path, chroma_server: str, embedder: str, address: str, env: dict[str, str]) -> subprocess.Popen:
        drivers.append(subprocess.Popen(
            index_command(photos, chroma_server, embedder, "--engine", "ray", "--ray-address", address,
                          "--ray-workers", "2", "--batch-size", "4"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        return drivers[-1]

    yield start
    for driver in drivers:
        if driver.poll() is None:
            driver.kill()
        try:
            driver.communicate(timeout=60)  # reaped, its pipes read and closed
        except subprocess.TimeoutExpired:  # a process it started still holds them: go on with the others
            pass


def assert_one_record_per_photo(chroma_server: str, embedder: str, folder: Path) -> None:
    from pictrieve.vectorstore.chroma_store import path_id
    from pictrieve.vectorstore.indexing import list_images

    paths = list_images(folder).paths
    gallery = stored(chroma_server, embedder)
    assert gallery.count() == len(paths) == PHOTOS + 1
    assert sorted(gallery.ids()) == sorted(path_id(path) for path in paths)
    assert sorted(item.path for item in gallery.items()) == sorted(str(path) for path in paths)


def test_a_killed_job_resumes_where_it_stopped(photos, chroma_server, tiny_clip_name, two_nodes, ray_env,
                                               start_job):
    pipe = hold_a_worker(photos)
    driver = start_job(photos, chroma_server, tiny_clip_name, two_nodes["address"], ray_env)
    writer = open_when_read(pipe, driver)
    try:
        written = wait_for(lambda: stored_count(chroma_server, tiny_clip_name), 240, "a first batch to be stored")
        driver.kill()  # the driver process, as a person's Ctrl-\ or a lost login would
        driver.communicate(timeout=60)
    finally:
        os.close(writer)
    os.replace(make_photo(photos.parent / "late.jpg", seed=7, size=(64, 48)), pipe)
    assert 0 < written < PHOTOS + 1
    report = run_cli(index_command(photos, chroma_server, tiny_clip_name, "--engine", "ray", "--ray-address",
                                   two_nodes["address"], "--ray-workers", "2", "--batch-size", "4"), ray_env)
    assert report["failed"] == [] and report["indexed"] + report["unchanged"] == PHOTOS + 1
    assert report["unchanged"] >= written  # what the killed job stored is kept, not embedded again
    assert_one_record_per_photo(chroma_server, tiny_clip_name, photos)


def test_kill_9_of_a_worker_loses_and_duplicates_nothing(photos, chroma_server, tiny_clip_name, two_nodes, ray_env,
                                                        start_job):
    from ray.util.state import list_actors

    pipe = hold_a_worker(photos)
    driver = start_job(photos, chroma_server, tiny_clip_name, two_nodes["address"], ray_env)
    writer = open_when_read(pipe, driver)
    try:
        def holder():  # the worker, found through Ray's state API, whose process has the pipe open
            actors = list_actors(address=two_nodes["state_api"], detail=True,
                                 filters=[("class_name", "=", INDEX_WORKER), ("state", "=", "ALIVE")])
            for actor in actors:
                try:
                    links = [os.readlink(entry) for entry in Path(f"/proc/{actor.pid}/fd").iterdir()]
                except OSError:
                    continue
                if str(pipe) in links:
                    return actor.pid
            return None

        pid = wait_for(holder, 60, "the worker holding the pipe")
        os.replace(make_photo(photos.parent / "late.jpg", seed=7, size=(64, 48)), pipe)  # what the retry reads
        os.kill(pid, signal.SIGKILL)
    finally:
        os.close(writer)
    out, err = driver.communicate(timeout=400)
    # Ray restarts the worker and runs its batch again (Ray Data's actor pools retry by default), so the
    # job itself finishes; the issue would accept a re-run, but we promise more in the README.
    assert driver.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["failed"] == [] and report["indexed"] == PHOTOS + 1, report
    assert_one_record_per_photo(chroma_server, tiny_clip_name, photos)


def test_a_chroma_server_that_stops_during_the_job_is_named_in_one_line(photos, tmp_path, tiny_clip_name,
                                                                         two_nodes, ray_env, start_job):
    """Ray reports a worker whose writes fail only as a stream that ended; the person is told which server
    stopped and that a re-run goes on, in one line, without a traceback."""
    from helpers.chroma import chroma_executable, start_chroma

    server, url = start_chroma(chroma_executable(), tmp_path / "dying-server")
    try:
        pipe = hold_a_worker(photos)
        driver = start_job(photos, url, tiny_clip_name, two_nodes["address"], ray_env)
        writer = open_when_read(pipe, driver)
        try:
            wait_for(lambda: stored_count(url, tiny_clip_name), 240, "a first batch to be stored")
            server.kill()
            server.wait(timeout=30)
            late = make_photo(photos.parent / "late.jpg", seed=7, size=(64, 48))
            os.replace(late, pipe)  # what the worker reads next
        finally:
            os.close(writer)  # the held worker goes on, and its batch's write finds no server
    finally:
        if server.poll() is None:  # a wait above failed: the server must not outlive the test
            server.kill()
            server.wait(timeout=30)
    out, err = driver.communicate(timeout=400)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("WARNING", "("))]
    assert driver.returncode != 0 and out == ""
    assert any(f"the Chroma server at {url} stopped answering" in line for line in lines), err[-3000:]
    assert "Traceback" not in err and "ObjectRefStreamEndOfStreamError" not in err, err[-3000:]


def test_a_gallery_folder_is_refused_in_one_line(photos, tmp_path):
    done = subprocess.run([*CLI, "index", str(photos), "--gallery", str(tmp_path / "g"), "--engine", "ray"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and not (tmp_path / "g").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Chroma server" in lines[0] and "cannot write into a local folder" in lines[0]


def test_without_ray_the_command_says_how_to_install_it(photos, chroma_server):
    code = ("import sys; sys.modules['ray'] = None; from pictrieve.cli.main import main; "
            "sys.argv = ['pictrieve', *sys.argv[1:]]; main()")
    done = subprocess.run([sys.executable, "-c", code, "index", str(photos), "--gallery", chroma_server,
                           "--engine", "ray"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install \"pictrieve[scale]\"" in lines[0]
    assert stored_nothing(chroma_server)


def stored_nothing(location: str) -> bool:
    from pictrieve.vectorstore.chroma_store import connect

    return connect(location, create=False).list_collections() == []


def test_ray_options_need_the_ray_engine(photos, tmp_path):
    done = subprocess.run([*CLI, "index", str(photos), "--gallery", str(tmp_path / "g"), "--ray-workers", "2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--ray-workers only apply with --engine ray" in done.stderr


def test_the_worker_pool_fits_the_cluster():
    from pictrieve.vectorstore.distributed.cluster import ClusterInfo, RayClusterError, RayOptions, worker_shape

    machine = ClusterInfo(address="local", local=True, cpus=8, gpus=0, nodes=1)
    assert (worker_shape(RayOptions(), machine).workers, worker_shape(RayOptions(), machine).cpus) == (8, 1)
    split = worker_shape(RayOptions(workers=2), machine)  # a local instance splits its cores
    assert (split.workers, split.cpus, split.threads) == (2, 4, 4)
    cluster = ClusterInfo(address="head:6379", local=False, cpus=16, gpus=4, nodes=2)
    gpu = worker_shape(RayOptions(gpus_per_worker=0.5), cluster)
    assert (gpu.workers, gpu.gpus, gpu.cpus) == (8, 0.5, 1)
    with pytest.raises(RayClusterError, match="do not fit"):
        worker_shape(RayOptions(workers=20), cluster)
    with pytest.raises(RayClusterError, match="has 0"):
        worker_shape(RayOptions(gpus_per_worker=1), machine)


def test_ray_finds_the_objects_local_indexing_finds(flickr_dir, chroma_server, tiny_clip_name, tmp_path, ray_env,
                                                    detector_cached):
    """--objects on a local Ray instance: the workers run the detector, and every record (objects included) equals
    local indexing's; later runs without the flag find the objects of a changed photo again, as locally."""
    from pictrieve.vectorstore.gallery import Gallery
    from pictrieve.vectorstore.photo_evidence import parse_objects

    folder = tmp_path / "photos"
    folder.mkdir()
    dev = sorted((flickr_dir / "images").glob("*.jpg"))
    for photo in dev[:4]:
        shutil.copy(photo, folder / photo.name)
    shutil.copy(dev[0], folder / "zz-copy.jpg")  # a copy within the run: stored by the driver, objects and all
    local = Gallery.open(tmp_path / "local", tiny_clip_name)
    expected = local.add(folder, progress=False, objects=True).to_dict()
    assert (expected["indexed"], expected["objects_found"]) == (5, 5)
    ray_run = ["--engine", "ray", "--ray-workers", "2", "--batch-size", "2"]
    report = run_cli(index_command(folder, chroma_server, tiny_clip_name, *ray_run, "--objects"), ray_env)
    assert report == {**expected, "objects_found": 4}, report  # the copy takes its twin's objects
    remote = stored(chroma_server, tiny_clip_name)
    assert_same_as_local(remote, local)
    assert any("person" in (parse_objects(item.metadata.get("objects")) or {}) for item in remote.items())
    # the gallery remembers: a photo changed in place is looked at again without the flag
    shutil.copyfile(dev[10], folder / dev[1].name)
    expected = local.add(folder, progress=False).to_dict()
    assert (expected["indexed"], expected["objects_found"]) == (1, 1)
    assert run_cli(index_command(folder, chroma_server, tiny_clip_name, *ray_run), ray_env) == expected
    assert_same_as_local(remote, local)
