"""The node's on-disk obfuscator pool: private files, each value used once."""

import os
import stat
import subprocess

import pytest
from gmpy2 import mpz, powmod

from crypto import FullObfuscators
from crypto.obfuscator_store import (
    ObfuscatorStore,
    filler_command,
    key_folder,
    spawn_fill,
)

N = mpz(1000000007) * mpz(998244353)  # a toy modulus: the store is key-agnostic


class Counter:
    """A deterministic source that never repeats (so reuse would show)."""

    def __init__(self, n):
        self.n = mpz(n)
        self.i = 0

    def draw(self):
        self.i += 1
        return mpz(self.i)


def test_fill_writes_private_files_and_take_deletes_what_it_returns(tmp_path):
    store = ObfuscatorStore(tmp_path / "pool", N)
    assert store.fill(70, Counter(N)) == 70 and len(store) == 70
    assert stat.S_IMODE(store.folder.stat().st_mode) == 0o700
    files = list(store.folder.glob("*.obf"))
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    first = store.take(40)
    second = store.take(40)  # only 30 left: the rest is drawn online by the caller
    assert len(first) == 40 and len(second) == 30 and len(store) == 0
    taken = [int(v) for v in first + second]
    assert sorted(taken) == list(range(1, 71))  # every value once, none twice
    assert not list(store.folder.glob("*.obf"))


def test_a_partial_take_keeps_only_the_unused_rest(tmp_path):
    store = ObfuscatorStore(tmp_path, N)
    store.fill(10, Counter(N))
    a = store.take(3)
    b = store.take(100)
    assert {int(v) for v in a}.isdisjoint(int(v) for v in b)
    assert len(a) + len(b) == 10


def test_values_are_nth_powers_from_the_full_source(tmp_path):
    n = mpz(2**61 - 1) * mpz(2**31 - 1)
    store = ObfuscatorStore(tmp_path, n)
    store.fill(3, FullObfuscators(n))
    for value in store.take(3):
        # an n-th power of a unit mod n^2 is 1 after raising to phi(n)
        phi = (mpz(2**61 - 2)) * (mpz(2**31 - 2))
        assert powmod(value, phi, n * n) == 1


def test_one_filler_at_a_time_and_target_is_a_level(tmp_path):
    store = ObfuscatorStore(tmp_path, N)
    with store._lock(".fill.lock"):
        assert store.fill(5, Counter(N)) == 0  # another filler is at work
    assert store.fill(5, Counter(N)) == 5
    assert store.fill(5, Counter(N)) == 0  # already at the target


def test_a_folder_others_can_read_is_refused(tmp_path):
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with pytest.raises(PermissionError, match="0700"):
        ObfuscatorStore(root, N)


def test_each_key_has_its_own_folder(tmp_path):
    assert key_folder(tmp_path, N) != key_folder(tmp_path, N + 2)


def test_no_second_filler_starts_while_one_is_at_work(tmp_path):
    # each start costs a Python process: one that would find the lock held and
    # exit is pure waste on the node's CPU
    store = ObfuscatorStore(tmp_path, N)
    with store._lock(".fill.lock"):
        assert store.filling()
        assert spawn_fill(tmp_path, N, 5, "full") is None
    assert not store.filling()


def test_the_filler_process_fills_without_the_crypto_package(tmp_path):
    n = mpz(2**61 - 1) * mpz(2**31 - 1)
    command = filler_command(tmp_path, n, 4, "full")
    # its start loads neither numpy nor the package's __init__ (aggregator etc.)
    loaded = "assert not {'numpy', 'crypto.dphe'} & set(sys.modules)"
    probe = command[2].replace("main()", loaded)
    subprocess.run([*command[:2], probe, command[3]], check=True, timeout=60)
    subprocess.run(command, check=True, timeout=60)
    store = ObfuscatorStore(tmp_path, n)
    assert len(store) == 4
    phi = (mpz(2**61 - 2)) * (mpz(2**31 - 2))
    assert all(powmod(v, phi, n * n) == 1 for v in store.take(4))
