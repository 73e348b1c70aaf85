"""``attnclust fit --batch-rows N``: DATA streamed through ``partial_fit`` in chunks of N
rows, then the summary and every output computed chunk by chunk (labels and attention by
``predict``): memory bounded by the chunk, not the file."""

from __future__ import annotations

from ._common import CommandError, progress_bar
from ._data import check_plot_columns, checked_block, file_weights, open_rows
from ._fit_common import data_units, output_files, plot_writer, prepare, run_fit
from ._summary import block_sums, fit_record, head_line, write_fit


def run(args) -> int:
    """``partial_fit`` over the chunks of DATA, then one more pass for every output."""
    from pathlib import Path

    from .._io import NpyRows, writable_folder
    from ..cluster.clustering import AttentionClustering

    if args.batch_rows < 1:
        raise CommandError(f"--batch-rows must be a positive integer, got {args.batch_rows}")
    params, prefix = prepare(args)
    # a .npy read block by block with plain reads (its values checked as they are read; a
    # memory map would keep every page it touched resident)
    rows = open_rows(args, NpyRows)
    X, features = rows.X, rows.columns
    check_plot_columns(args, len(features))
    # a weight file is read whole (n numbers); a weight column chunk by chunk
    weights = None if args.sample_weight is None else file_weights(args, X.shape[0])
    if args.n_clusters > min(args.batch_rows, X.shape[0]):
        raise CommandError(f"--n-clusters {args.n_clusters} is larger than the rows of the "
                           f"first chunk ({min(args.batch_rows, X.shape[0])}); use a larger "
                           "--batch-rows")
    with writable_folder(Path(prefix).parent):
        model = AttentionClustering(args.n_clusters, **params)
        bar = progress_bar(X.shape[0], args.quiet, desc="partial_fit", unit="row",
                           unit_scale=True)

        def fit():
            for block, w in _chunks(args, X, weights):
                # leading chunks of weight zero count for nothing and cannot seed the heads
                if hasattr(model, "cluster_centers_") or w is None or w.sum() > 0:
                    model.partial_fit(block, sample_weight=w)
                if bar is not None:
                    bar.update(block.shape[0])
            if not hasattr(model, "cluster_centers_"):
                raise CommandError("the weights sum to zero (--sample-weight, "
                                   "--weight-column): no row has a positive weight")
            return model
        est, seconds = run_fit(fit, bar)
        _write_outputs(args, prefix, est, X, weights, seconds, rows)
    return 0


def _chunks(args, X, weights):
    """``(rows, weights)`` of each chunk of ``--batch-rows``, checked (see
    :func:`attnclust.cli._data.checked_block`)."""
    import numpy as np

    for start in range(0, X.shape[0], args.batch_rows):
        block = np.asarray(X[start:start + args.batch_rows])
        yield checked_block(args, block, args.data, start, X.shape[0], weights)


def _write_outputs(args, prefix, est, X, weights, seconds, rows) -> None:
    """Print the summary, from one more pass over the chunks, and write the outputs (labels
    and attention written chunk by chunk; ``rows``: DATA as :func:`open_rows` read it, the
    clustered columns' names among it)."""
    import numpy as np

    features = rows.columns

    K = args.n_clusters
    sizes, conf_sum, sq_err, total = np.zeros(K), np.zeros(K), 0.0, 0.0
    for block, w in _chunks(args, X, weights):
        proba = est.predict_proba(block)
        labels = proba.argmax(1)
        sizes += np.bincount(labels, minlength=K)
        ww = np.ones(block.shape[0]) if w is None else w
        conf, err = block_sums(est, block, labels, proba, K, ww)
        conf_sum += conf
        sq_err += err
        total += float(ww.sum())
    n = X.shape[0]
    names = [f"cluster_{k}" for k in range(K)]
    labels = _chunked_writer(args, X, weights, lambda b: est.predict(b), (n,), np.int64,
                             ["label"])
    outputs = output_files(
        args, prefix, data_units(est)[0], labels, features=features,
        proba=lambda: _chunked_writer(args, X, weights, est.predict_proba, (n, K), np.float64,
                                      names),
        picture=lambda: plot_writer(args, est, _Features(args, X), None, sizes,
                                    features=features))
    weighted = args.sample_weight is not None or args.weight_column is not None
    head = head_line(n, est.n_features_in_, K, weights=np.array([total]) if weighted else None,
                     inverse_temperature=est.inverse_temperature_,
                     progress=f"batches={est.n_steps_} of at most {args.batch_rows} rows",
                     risk=sq_err / total, seconds=seconds)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_mean = conf_sum / sizes
    record = fit_record(args, est, n=n, d=est.n_features_in_, features=features,
                        notes=rows.notes, header=rows.header,
                        sizes=sizes, conf_mean=conf_mean, risk=sq_err / total,
                        seconds=seconds, rows_read=n)
    write_fit(args, prefix, outputs, [head], sizes, conf_mean, est=est, record=record)


def _chunked_writer(args, X, weights, fn, shape, dtype, columns):
    """A writer (see :func:`attnclust._io.save_matrices`) that fills its file chunk by chunk
    with ``fn(rows)``: a ``.npy`` header then the rows' bytes, or ``.csv`` lines under the
    header ``columns``."""
    import numpy as np

    from .._atomic import write_csv_rows

    def write(path) -> None:
        if str(path).lower().endswith(".npy"):
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                      "fortran_order": False, "shape": shape}
            with open(path, "wb") as f:
                np.lib.format.write_array_header_1_0(f, header)
                for block, _ in _chunks(args, X, weights):
                    f.write(np.ascontiguousarray(fn(block), dtype=dtype).tobytes())
            return
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(",".join(columns) + "\n")
            for block, _ in _chunks(args, X, weights):
                write_csv_rows(f, np.asarray(fn(block), dtype=dtype))
    return write


class _Features:
    """DATA's rows without ``--weight-column``, read by blocks (for the picture)."""

    def __init__(self, args, X):
        self._args, self._X = args, X
        d = X.shape[1] - (args.weight_column is not None)
        self.shape = (X.shape[0], d)

    def __getitem__(self, key):
        import numpy as np

        block = np.asarray(self._X[key])
        j = self._args.weight_column
        return block if j is None else np.delete(block, j - 1, axis=-1)
