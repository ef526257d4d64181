"""The CriteoReader op from Python (sf.ops.criteo_reader, generated from the op's registration):
the same batches as the C++ tests pin (tests/kernels/criteo_format_test.cc), and errors as
sf.errors exceptions naming the file and line."""

import gzip
import math
import os

import numpy as np
import pytest

import shardflow as sf

SAMPLE = os.path.join(os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                      "tests", "data", "criteo_sample.tsv")


def _read_all(files, **attrs):
    g = sf.Graph()
    with g.as_default():
        label, dense, cat, malformed = sf.ops.criteo_reader(files="\n".join(files), **attrs)
        with sf.Session(graph=g) as s:
            out = []
            while True:
                try:
                    out.append(s.run([label, dense, cat, malformed]))
                except sf.errors.OutOfRangeError:
                    return out


def _python_dense(line):
    """DLRM's transform of a line's 13 integer fields, computed in Python."""
    fields = line.rstrip("\r\n").split("\t")
    return [math.log1p(max(int(v), 0)) if v else 0.0 for v in fields[1:14]]


def test_sample_file_gives_the_values_pinned_in_cpp():
    batches = _read_all([SAMPLE], batch_size=16, num_threads=1)
    assert len(batches) == 1
    label, dense, cat, malformed = batches[0]
    assert label.tolist() == [0.0, 1.0, 0.0, 1.0]
    with open(SAMPLE, newline="") as f:
        lines = f.read().split("\n")
    np.testing.assert_allclose(dense, np.array([_python_dense(l) for l in lines], np.float32), rtol=1e-6)
    assert cat.dtype == np.int64 and cat.shape == (4, 26)
    assert cat[0, 0] == 7384456582413320978    # C1 68fd1e64 in field 0: XXH3 seeded with 0
    assert cat[0, 21] == 6586551304257306160   # C22 missing
    assert cat[1, 4] == -7381165873753042588   # "00ab" in field 4
    assert cat[1, 5] == -5290520007784034071   # "AB" in field 5
    assert malformed == 0


def test_gzip_and_threads_give_every_line_once(tmp_path):
    with open(SAMPLE, newline="") as f:
        text = f.read().rstrip("\n") + "\n"
    plain = tmp_path / "a.tsv"
    plain.write_text(text * 50)
    with gzip.open(tmp_path / "b.gz", "wt", newline="") as f:
        f.write(text * 50)
    batches = _read_all([str(plain), str(tmp_path / "b.gz")], batch_size=7, num_threads=2, chunk_bytes=997)
    rows = sum(b[0].shape[0] for b in batches)
    assert rows == 400
    labels = np.concatenate([b[0] for b in batches])
    assert labels.sum() == 200


def test_bad_lines_and_files_raise_naming_them(tmp_path):
    bad = tmp_path / "bad.tsv"
    with open(SAMPLE, newline="") as f:
        first = f.readline()
    bad.write_text(first + "1\t2\t3\n" + first)
    skipped = _read_all([str(bad)])
    assert sum(b[0].shape[0] for b in skipped) == 2
    assert skipped[-1][3] == 1
    with pytest.raises(sf.errors.InvalidArgumentError, match=r"bad.tsv' line 2"):
        _read_all([str(bad)], on_malformed="fail")
    with pytest.raises(sf.errors.NotFoundError, match="missing.tsv"):
        _read_all([str(tmp_path / "missing.tsv")])
    whole = gzip.compress((first * 2000).encode())
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(sf.errors.DataLossError, match="cut.gz"):
        _read_all([str(tmp_path / "cut.gz")])
