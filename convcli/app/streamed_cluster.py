"""One image too large for memory on a Dask cluster: its row bands as tasks across the workers.

A file processed on a Dask worker (``--scheduler``) whose work would not fit
the memory budget is split here, where :mod:`convcli.app.streamed` would
compute it alone in strips. The file's task becomes the coordinator: through
``distributed.worker_client`` (it leaves its worker's thread to the tasks it
starts) it sends bands of output rows to the workers, each computed in strips
of the same height as on one machine (:func:`convcli.app.strips.strip_results`
with ``band``), so each worker's memory is bounded the same way.

1. **Statistics.** Each pass of the mappings' statistics is a task per band
   returning :class:`convcli.levels.stats.MappingPart` s, merged here (the
   merge is exact, whatever the split: the scale is the local run's).
2. **Output.** ``--format zarr``: the stores are made here under their
   temporary names, the workers write their bands straight into them (bands
   of whole chunk rows at each level they fill, so no two tasks write one
   chunk), then the smaller levels are made here from the last level filled
   and the stores renamed into place. Other formats: the bands' results come
   back here in order (a bounded number in flight) and are written as on one
   machine.

Every value is the local run's: the bands' strips are computed as the whole
image's (see :mod:`convcli.app.strips`) and mapped with the same scales.
"""

from __future__ import annotations

import copy
import errno
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..engines.dask import _prepare_worker, layer_threads
from ..engines.processes import WORKER_DIED
from ..io.formats import open_regions
from ..io.image_files import written_by_convcli
from ..io.row_writers import TILE, store_location
from ..io.safeio import atomic_output
from ..io.zarr_stores import StoreBand, band_levels, create_store, finish_store, level_sizes
from ..levels.stats import pass_indices
from .outputs import kept_by, output_array, output_record, output_scales, store_place
from .streamed import (
    _Outputs,
    _Overview,
    _overview_factor,
    plan_in_strips,
    save_overviews,
)
from .strips import plan_strips, row_geometry, strip_results

IN_FLIGHT_PER_THREAD = 2
"""Band tasks submitted and not yet taken, for each thread of the cluster."""


def cluster_client():
    """The ``worker_client`` context of the Dask worker running this task, or None elsewhere.

    A Dask worker has ``distributed`` loaded; elsewhere it is not imported for the question
    (half a second of every run in strips).
    """
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        distributed.get_worker()
    except ValueError:
        return None
    return distributed.worker_client()


@dataclass(frozen=True)
class BandJob:
    """What each band task needs: the image, the operation and the strips' height."""

    source: str
    storage_options: dict | None
    op: object
    rows_per_strip: int
    threads: dict | None = None  # layer threads by worker address (convcli.engines.dask)


def plan_bands(op, source, rows_per_strip: int, *, chunk_rows: int = 1) -> list[tuple[int, int]]:
    """The bands of output rows ``(out0, out1)`` that tasks compute, covering the result once.

    Each holds the strips of `rows_per_strip` rows and starts on a multiple of
    `chunk_rows`; a last band shorter than the others joins the one above.
    A result that one engine tile holds is one band.
    """
    geometry = row_geometry(op, source.height, source.width)
    step = -(-rows_per_strip // chunk_rows) * chunk_rows
    return [(strip.out0, strip.out1) for strip in plan_strips(geometry, source.height, step)]


def _band_strips(job: BandJob, band: tuple[int, int]) -> Iterator[tuple[object, np.ndarray]]:
    """The strips of `band` computed from the image, opened here (on a worker)."""
    _prepare_worker(job.threads or {})  # its layer threads, as for a file's task
    with open_regions(job.source, storage_options=job.storage_options) as source:
        yield from strip_results(job.op, source, rows_per_strip=job.rows_per_strip, band=band)


def band_statistics(job: BandJob, band: tuple[int, int], parts: dict) -> dict:
    """The mapping parts (by result channel) of one pass, given the rows of `band` (a task).

    `parts` are empty parts, shared by the tasks on a worker: copies are filled.
    """
    parts = copy.deepcopy(parts)
    with np.errstate(all="ignore"):
        for strip, result in _band_strips(job, band):
            for index, part in parts.items():
                part.add(strip.out0, np.ascontiguousarray(result[:, :, index]))
    return parts


def band_result(job: BandJob, band: tuple[int, int]) -> np.ndarray:
    """The result's rows of `band`, (out1 - out0, W', C') float32 (a task)."""
    with np.errstate(all="ignore"):
        return np.concatenate([result for _, result in _band_strips(job, band)])


def band_into_stores(
    job: BandJob, band: tuple[int, int], plans: _Outputs, stores: list, keep: bool
) -> tuple[int, np.ndarray | None]:
    """Write `band`'s rows into each Zarr store of `stores` (a task).

    Returns the band's count of non-finite values, and its result where
    `keep` (for ``--figure``'s overview).
    """
    last = band[1] == plans.size[0]
    writers = [
        StoreBand(
            store.location,
            store.shape,
            store.dtype,
            top=band[0],
            levels=store.levels,
            last=last,
            storage_options=store.storage_options,
            claim=store.claim,
        )
        for store in stores
    ]
    not_finite, kept = 0, []
    try:
        with np.errstate(all="ignore"):
            for _, result in _band_strips(job, band):
                not_finite += plans.not_finite(result)
                for store, writer in zip(stores, writers, strict=True):
                    writer.write(output_array(store.out, result, plans))
                if keep:
                    kept.append(result)
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.discard()
        raise
    return not_finite, np.concatenate(kept) if keep else None


def in_order(client, function: Callable, job, bands: list, *args, in_flight: int) -> Iterator:
    """``function(job, band, *args)``'s results on the cluster, band by band in order.

    At most `in_flight` tasks are submitted and not yet taken; each result is
    let go as soon as it is yielded. A band whose worker died in every try
    (Dask's ``KilledWorker``) fails the file, with an OSError saying so.
    """
    pending: deque = deque()
    queued = iter(bands)

    def submit(band) -> None:
        pending.append(client.submit(function, job, band, *args, pure=False))

    for band in queued:
        submit(band)
        if len(pending) >= in_flight:
            break
    from distributed import KilledWorker

    while pending:
        future = pending.popleft()
        try:
            result = future.result()
        except KilledWorker:  # Dask ran it again each time its worker died, then gave up
            raise OSError(
                errno.EIO, f"{WORKER_DIED} in each try of one of its band tasks (out of memory?)"
            ) from None
        future.release()
        band = next(queued, None)
        if band is not None:
            submit(band)
        yield result


@dataclass(frozen=True)
class _Store:
    """A Zarr output being written by the workers: where (a folder or a URL), its layout,
    the levels they fill, and the run's claim on it (on object storage)."""

    out: object
    location: str
    shape: tuple[int, int, int]
    dtype: np.dtype
    levels: int
    storage_options: dict | None = None
    claim: str | None = None


def process_on_cluster(
    task,
    source,
    todo,
    *,
    client,
    budget: int,
    timings: dict,
    written: list[str],
    records: list[dict],
) -> tuple[int, int]:
    """:func:`convcli.app.streamed.process_in_strips`, its bands as tasks on `client`'s cluster.

    The same outputs, records and count of non-finite values, value for value.
    Returns that count and the number of bands (each pass a task per band).
    """
    op, start = task.op, time.perf_counter()
    grids, files, rows, size, plans = plan_in_strips(task, source, todo, budget)
    workers = client.scheduler_info()["workers"]
    in_flight = max(2, IN_FLIGHT_PER_THREAD * sum(w.get("nthreads", 1) for w in workers.values()))
    zarr = task.fmt == "zarr" and bool(files)
    bands = plan_bands(op, source, rows, chunk_rows=_chunk_rows(rows) if zarr else 1)
    job = BandJob(task.source, task.storage_options, op, rows, layer_threads(client, workers))
    [job] = client.scatter([job], hash=False)
    for pass_index in pass_indices(plans):
        _statistics(client, job, bands, plans, pass_index, in_flight)
    overview = (
        _Overview(_overview_factor(source.height, source.width), size[1], size[2])
        if grids
        else None
    )
    if zarr:
        not_finite = _into_stores(client, job, bands, plans, overview, in_flight, written, records)
    else:
        results = (
            (band, result)
            for band, result in zip(
                bands, in_order(client, band_result, job, bands, in_flight=in_flight), strict=True
            )
        )
        if overview is not None:
            results = (overview.add(result) or (band, result) for band, result in results)
        not_finite = plans.write(results, written, records)
    save_overviews(grids, task, source, overview, plans.depth, written, records)
    timings["compute"] = time.perf_counter() - start
    return not_finite, len(bands)


def _chunk_rows(rows: int) -> int:
    """Rows of a Zarr output's bands: chunk rows, a power of two of them, from `rows` up."""
    chunks = -(-rows // TILE)
    return TILE << max(0, (chunks - 1).bit_length())


def _statistics(client, job, bands: list, plans: _Outputs, pass_index: int, in_flight: int) -> None:
    """One pass of the mappings' statistics: a part per band, merged, taken by each mapping."""
    maps = {index: mapping for index, mapping in plans.maps.items() if pass_index < mapping.passes}
    empty = {index: mapping.part(pass_index) for index, mapping in maps.items()}
    [parts] = client.scatter([empty], hash=False)
    merged = {index: mapping.part(pass_index) for index, mapping in maps.items()}
    for band_parts in in_order(client, band_statistics, job, bands, parts, in_flight=in_flight):
        for index, part in band_parts.items():
            merged[index].merge(part)
    for index, mapping in maps.items():
        mapping.take(merged[index])


def _into_stores(
    client,
    job,
    bands: list,
    plans: _Outputs,
    overview,
    in_flight: int,
    written: list[str],
    records: list[dict],
) -> int:
    """The Zarr outputs, written by the workers (see the module docstring); non-finite values."""
    from contextlib import ExitStack

    not_finite = 0
    with ExitStack() as stack:
        stores, outputs = _create_stores(stack, plans, bands)
        [shared] = client.scatter([plans], hash=False)
        for count, result in in_order(
            client,
            band_into_stores,
            job,
            bands,
            shared,
            stores,
            overview is not None,
            in_flight=in_flight,
        ):
            not_finite += count
            if overview is not None:
                overview.add(result)
        for store in stores:
            finish_store(
                store.location,
                store.shape,
                store.dtype,
                written=store.levels,
                storage_options=store.storage_options,
                claim=store.claim,
                carried=kept_by(
                    plans.task, plans.carried, store.out, output_scales(store.out, plans)
                ),
            )
    for store, output in zip(stores, outputs, strict=True):
        if output.written:
            written.append(str(store.out.path))
            scales = output_scales(store.out, plans)
            records.append(
                output_record(
                    store.out,
                    scales,
                    plans.depth,
                    kept_by(plans.task, plans.carried, store.out, scales),
                )
            )
    return not_finite


def _create_stores(stack, plans: _Outputs, bands: list) -> tuple[list, list]:
    """The empty Zarr stores of the outputs to write, each in its temporary place (closed
    with `stack`), and their atomic outputs; an existing store kept has none."""
    band_rows = bands[0][1] - bands[0][0]
    stores, outputs = [], []
    for out in plans.todo:
        layout = plans._layout(out)
        output = stack.enter_context(
            atomic_output(
                out.path,
                overwrite=plans.task.overwrite,
                replaceable=written_by_convcli,
                folder=True,
            )
        )
        if output.temporary is None:  # an existing store kept
            continue
        place = store_place(plans.task, out.path)  # on object storage: written there
        options = place.get("storage_options")
        location, claim = store_location(stack, output.temporary, place.get("store_url"), options)
        shape = (layout["height"], layout["width"], layout["channels"])
        dtype = np.dtype(layout["dtype"])
        create_store(location, shape, dtype, options)
        levels = (
            1 if len(bands) == 1 else band_levels(band_rows, len(level_sizes(shape[0], shape[1])))
        )
        stores.append(_Store(out, location, shape, dtype, max(1, levels), options, claim))
        outputs.append(output)
    return stores, outputs
