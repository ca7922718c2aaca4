"""The prefix store's tier on disk: a prompt prefilled in one process is fed only in part by the
next, with the same bits; corrupt entries are recomputed; concurrent writers lose nothing."""

import copy
import multiprocessing
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import SYSTEM, TURN_1, TURN_2

from specguard_graph.errors import ConfigError
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.models.local.prefix_store.disk import DiskPrefixes, disk_tier, fingerprint
from specguard_graph.testing import tiny_exact_lm


@pytest.fixture(scope="module")
def int8() -> LocalCausalLM:
    return tiny_exact_lm()


def process(lm: LocalCausalLM, folder: Path, monkeypatch, limit: int | None = None):
    """The same weights in a new process: an empty memory, the disk tier in `folder`."""
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK", str(folder))
    if limit is not None:
        monkeypatch.setenv("SPECGUARD_PREFIX_DISK_BYTES", str(limit))
    return LocalCausalLM(lm.model, lm.tokenizer, name="process")


def cold_logits(lm: LocalCausalLM, text: str, monkeypatch) -> torch.Tensor:
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK", "off")
    cold = LocalCausalLM(lm.model, lm.tokenizer, name="cold")
    pc = cold.new_prefix(text)
    out = cold.next_logits(pc)
    assert pc.reused_tokens == 0
    return out


def test_a_new_process_feeds_only_what_an_earlier_one_did_not_with_the_same_bits(
    int8, tmp_path, monkeypatch
):
    first = process(int8, tmp_path, monkeypatch)
    pc1 = first.new_prefix(TURN_1)
    first.next_logits(pc1)
    assert pc1.reused_tokens == 0

    second = process(int8, tmp_path, monkeypatch)  # nothing in its memory
    pc2 = second.new_prefix(TURN_2)
    logits = second.next_logits(pc2)
    assert pc2.reused_tokens >= len(pc1.ids) - 2  # the first prompt came from disk
    assert pc2.prefill_tokens <= len(pc2.ids) - len(pc1.ids) + 2
    assert second.prefix_store.disk.hits == 1
    assert torch.equal(logits, cold_logits(int8, TURN_2, monkeypatch))  # bit for bit


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_corrupt_entry_is_ignored_with_one_warning_deleted_and_recomputed(
    int8, tmp_path, monkeypatch, damage
):
    first = process(int8, tmp_path, monkeypatch)
    first.next_logits(first.new_prefix(TURN_1))
    (entry,) = tmp_path.glob("*/*.kv")
    raw = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(raw[: len(raw) // 2])
    else:  # one bit of the payload
        at = len(raw) - 100
        entry.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :])

    second = process(int8, tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pc = second.new_prefix(TURN_1)
        logits = second.next_logits(pc)
    said = [str(w.message) for w in caught if "corrupt" in str(w.message)]
    assert len(said) == 1 and entry.name in said[0]
    assert pc.reused_tokens == 0 and second.prefix_store.disk.corrupt == 1
    assert torch.equal(logits, cold_logits(int8, TURN_1, monkeypatch))
    # recomputed and stored again, whole
    third = process(int8, tmp_path, monkeypatch)
    pc3 = third.new_prefix(TURN_1)
    third.next_logits(pc3)
    assert pc3.reused_tokens > 0 and third.prefix_store.disk.corrupt == 0


def _writer(folder: str, seed: int) -> None:
    torch.manual_seed(seed)
    layers = [(torch.randn(1, 2, 40, 8), torch.randn(1, 2, 40, 8)) for _ in range(2)]

    class Cache:  # what `store` reads of a cache
        def __init__(self):
            self.layers = [type("L", (), {"keys": k, "values": v})() for k, v in layers]

    disk = DiskPrefixes(Path(folder), "model", None)
    for n in range(20):  # the same prompts in every process, and some of its own
        disk.store(list(range(n, n + 40)), Cache())
        own = 100_000 * seed + 100 * n
        disk.store(list(range(own, own + 40)), Cache())


def test_two_processes_writing_at_once_lose_nothing_and_corrupt_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), s)) for s in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    disk = DiskPrefixes(tmp_path, "model", None)
    files = sorted(disk.dir.glob("*.kv"))
    assert len(files) == 20 + 2 * 20 and len(list(disk.dir.glob("*.ids"))) == len(files)
    assert not list(disk.dir.glob(".tmp-*"))
    for f in files:
        assert disk._read(f) is not None
    assert disk.corrupt == 0


def test_the_folder_is_bounded_and_keeps_the_recently_used(int8, tmp_path, monkeypatch):
    lm = process(int8, tmp_path, monkeypatch)
    lm.next_logits(lm.new_prefix(TURN_1))
    one = lm.prefix_store.disk.size()
    # room for two entries: the third prompt pushes out the least recently used
    small = process(int8, tmp_path / "small", monkeypatch, limit=int(2.5 * one))
    texts = [f"Question number {i}. " + SYSTEM + "Assistant:" for i in range(3)]  # no shared prefix
    small.next_logits(small.new_prefix(texts[0]))
    small.next_logits(small.new_prefix(texts[1]))
    os.utime(next((tmp_path / "small").glob("*/*.kv")), (0, 0))  # make the order certain
    entries = sorted((tmp_path / "small").glob("*/*.kv"), key=lambda p: p.stat().st_mtime)
    small.next_logits(small.new_prefix(texts[2]))
    left = set((tmp_path / "small").glob("*/*.kv"))
    assert entries[0] not in left and entries[1] in left and len(left) == 2
    assert small.prefix_store.disk.size() <= int(2.5 * one)


def test_it_turns_off_and_refuses_a_bad_limit(int8, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK", "off")
    assert disk_tier(int8.model) is None
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK", str(tmp_path))
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK_BYTES", "lots")
    with pytest.raises(ConfigError, match="SPECGUARD_PREFIX_DISK_BYTES"):
        disk_tier(int8.model)
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK_BYTES", "0")  # a limit of 0 stores nothing
    lm = LocalCausalLM(int8.model, int8.tokenizer)
    lm.next_logits(lm.new_prefix(TURN_1))
    assert not list(tmp_path.glob("*/*.kv"))


def test_another_model_never_reads_the_entries(int8, tmp_path, monkeypatch):
    other = copy.deepcopy(int8.model)
    with torch.no_grad():
        next(iter(other.parameters())).add_(1.0)
    assert fingerprint(other) != fingerprint(int8.model)
    assert fingerprint(copy.deepcopy(int8.model)) == fingerprint(int8.model)
    first = process(int8, tmp_path, monkeypatch)
    first.next_logits(first.new_prefix(TURN_1))
    monkeypatch.setenv("SPECGUARD_PREFIX_DISK", str(tmp_path))
    stranger = LocalCausalLM(other, int8.tokenizer)
    pc = stranger.new_prefix(TURN_1)
    stranger.next_logits(pc)
    assert pc.reused_tokens == 0


def test_a_prompt_prefilled_by_another_os_process_is_read_here(int8, tmp_path, monkeypatch):
    """Two real processes: a child prefills TURN_1 into the folder; this one then reuses it."""
    script = textwrap.dedent(f"""
        import os
        os.environ["SPECGUARD_PREFIX_DISK"] = {str(tmp_path / "disk")!r}
        from specguard_graph.testing import tiny_exact_lm
        lm = tiny_exact_lm()
        lm.next_logits(lm.new_prefix({TURN_1!r}))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    here = process(int8, tmp_path / "disk", monkeypatch)
    pc = here.new_prefix(TURN_2)
    logits = here.next_logits(pc)
    assert pc.reused_tokens > 0 and here.prefix_store.disk.hits == 1
    assert torch.equal(logits, cold_logits(int8, TURN_2, monkeypatch))


def test_a_prompt_that_adds_a_few_tokens_to_a_stored_one_is_not_written_again(
    int8, tmp_path, monkeypatch
):
    from specguard_graph.models.local.prefix_store.disk import MIN_NEW

    base = SYSTEM * 5 + "User: list the files.\nAssistant:"
    lm = process(int8, tmp_path, monkeypatch)
    lm.next_logits(lm.new_prefix(base))
    lm.next_logits(lm.new_prefix(base + " ls()\nTool: notes.txt\nAssistant:"))  # a near copy
    assert len(list(tmp_path.glob("*/*.kv"))) == 1
    longer = base + " ls -l\nTool: " + "notes.txt 2 KB, " * (MIN_NEW // 4) + "\nAssistant:"
    lm.next_logits(lm.new_prefix(longer))  # MIN_NEW tokens more: worth a second entry
    assert len(list(tmp_path.glob("*/*.kv"))) == 2
