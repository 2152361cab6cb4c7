"""Every archive a full data set is made from, by data set: what ``scalebench data import``
recognises."""

from __future__ import annotations

from workers.data.archives import Archive


def archives_by_set() -> dict[str, tuple[Archive, ...]]:
    """{data set name: the archives it is prepared from}."""
    from workers.data.epsilon import EPSILON_TEXT, epsilon_archive, libsvm_bound
    from workers.data.sources import EPSILON_SOURCES
    from workers.data.wikitext import WIKITEXT2_ARCHIVE
    from workers.data.wmt16 import WMT16_ARCHIVES
    from workers.data.wmt17 import WMT17_ARCHIVES

    rows = {"train": 400_000, "test": 100_000}
    epsilon = tuple(
        epsilon_archive(split, EPSILON_SOURCES[split], libsvm_bound(rows[split], 2000))
        for split in EPSILON_TEXT
    )
    return {
        "epsilon": epsilon,
        "wikitext2": (WIKITEXT2_ARCHIVE,),
        "wmt16-en-de": WMT16_ARCHIVES,
        "wmt17-en-de": WMT17_ARCHIVES,
    }
