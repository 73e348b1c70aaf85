"""Workers over row chunks: sums in chunk order, and what a sum holds at a time."""

import numpy as np
import pytest

from attnclust._threads import add_chunks, map_chunks


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_chunk_sums_are_those_added_in_chunk_order(workers):
    parts = np.random.default_rng(0).standard_normal((37, 5)) * 10.0 ** np.arange(-8, 9, 4)
    ordered = np.zeros(5)
    for part in parts:                         # the plain loop, in chunk order
        ordered += part
    got = add_chunks(np.zeros(5), lambda s: parts[s // 3], 3 * len(parts), 3, workers)
    np.testing.assert_array_equal(got, ordered)             # bit for bit, any thread count
    listed = np.zeros(5)
    for part in map_chunks(lambda s: parts[s // 3], 3 * len(parts), 3, workers):
        listed += part
    np.testing.assert_array_equal(got, listed)


class _Part:
    """A chunk's result that counts how many are alive."""

    alive = peak = 0

    def __init__(self, value):
        self.value = value
        _Part.alive += 1
        _Part.peak = max(_Part.peak, _Part.alive)

    def __del__(self):
        _Part.alive -= 1


class _Total:
    def __init__(self):
        self.value = 0

    def __iadd__(self, part):
        self.value += part.value
        return self


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_a_sum_over_many_chunks_holds_few_results_at_a_time(workers):
    _Part.alive = _Part.peak = 0
    total = add_chunks(_Total(), _Part, 1000, 1, workers)
    assert total.value == sum(range(1000))
    assert _Part.peak <= 2 * workers + 1        # not the 1,000 results of a list
