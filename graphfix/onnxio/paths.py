"""Output planning: every file a run reads and writes, checked before any work.

graphfix runs in deploy scripts on the only copy of someone's export, so before anything is
loaded or computed, :func:`plan_fix` resolves every path the run will read (the model, each
external-data file it names, ``--load-inputs``) and every path it will write (the model, its
external-data file, each report and its polygraphy sidecars, the TensorRT engine) and refuses:

- a write onto anything read (the input, its weights, the loaded inputs), however spelled:
  ``./in.onnx``, ``sub/../in.onnx``, a symlink or a hard link to it (same device and inode);
- two writes onto the same file (``--report r.json --report r.inputs.json`` collides with the
  first report's sidecar);
- a write target that is a directory or not a regular file (a FIFO, a device, a link to one, a
  symlink loop), a missing or unwritable folder (probed by creating a file, since ``os.access``
  says yes to root on read-only mounts), a name longer than the filesystem takes;
- a report extension other than ``.json``/``.md``/``.html``;
- inputs that are missing, directories, devices or FIFOs (``/dev/zero`` would be read forever),
  or larger than protobuf can parse;
- external-data locations that are absolute, leave the model's folder, are missing or shorter
  than the tensors they declare.
"""

from __future__ import annotations

import functools
import mmap
import os
import stat
import tempfile
import unicodedata
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from graphfix.errors import GraphfixError, first_line
from graphfix.fs.names import aux_name_bytes, file_kind, writable_target
from graphfix.onnxio import parse
from graphfix.onnxio.proto import PROTO_LIMIT, tensor_bytes

#: protobuf cannot parse or serialise a message of 2 GiB or more. A model file, or a model with
#: its external data loaded, above this is refused (until graphfix keeps big weights on disk).
MAX_MODEL_BYTES = PROTO_LIMIT
#: Largest ``--load-inputs`` file (and uncompressed ``.npz`` content) graphfix reads.
MAX_INPUTS_BYTES = 2**31
#: Largest TensorRT log ``graphfix explain`` reads.
MAX_LOG_BYTES = 256 * 2**20
GIB = 2**30


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class Use:
    """One file the run touches, and what it is to the user (named in refusals)."""

    role: str
    path: Path


@dataclass
class Plan:
    reads: list[Use] = field(default_factory=list)
    writes: list[Use] = field(default_factory=list)

    def read_paths(self) -> list[Path]:
        return [u.path for u in self.reads]

    def write_paths(self) -> list[Path]:
        return [u.path for u in self.writes]


# ------------------------------------------------------------------------------ reads
def check_readable(path: str | os.PathLike, role: str = "input", limit: int | None = None, allow_pipe: bool = False) -> Path:
    """An existing regular file (FIFOs too with ``allow_pipe``), readable, at most ``limit`` bytes."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise GraphfixError("no such file", str(p)) from None
    except OSError as exc:
        raise GraphfixError(f"cannot read {role} ({first_line(exc)})", str(p)) from exc
    if stat.S_ISDIR(st.st_mode):
        raise GraphfixError(f"is a directory, not {_article(role)}", str(p))
    if not (stat.S_ISREG(st.st_mode) or (allow_pipe and stat.S_ISFIFO(st.st_mode))):
        raise GraphfixError(f"not a regular file ({file_kind(st.st_mode)}); graphfix reads {role}s only from regular files", str(p))
    if not os.access(p, os.R_OK):
        raise GraphfixError(f"cannot read {role} (permission denied)", str(p))
    if limit is not None and stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise GraphfixError(f"{role} is {gib(st.st_size)}; graphfix reads at most {gib(limit)}", str(p))
    return p


def _article(role: str) -> str:
    return f"an {role}" if role[:1] in "aeiou" else f"a {role}"


def check_model_file(path: str | os.PathLike) -> Path:
    """The model file itself: regular, readable, small enough for protobuf to parse."""
    p = check_readable(path, "ONNX model")
    size = p.stat().st_size
    if size > MAX_MODEL_BYTES:
        raise GraphfixError(
            f"model file is {gib(size)}; one ONNX protobuf file cannot exceed 2 GiB: "
            "save the weights as external data (onnx.save_model(..., save_as_external_data=True))", str(p))
    return p


@dataclass(frozen=True)
class ExternalTensor:
    tensor: str
    location: str
    file: Path
    offset: int
    length: int | None


def external_data(path: str | os.PathLike) -> list[ExternalTensor]:
    """Every tensor of the model stored outside it, checked: relative location inside the model's
    folder, an existing regular file, long enough for offset + length. Raises GraphfixError."""
    p = Path(path)
    if not _mentions_location(p):
        return []
    try:
        model = parse.parse_for_plan(p)  # kept for load_model: the run parses the file once
    except Exception:  # noqa: BLE001 - an unreadable model is load_model's message to give
        return []
    folder = p.parent
    found: list[ExternalTensor] = []
    for tensor in _external_tensors(model):
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        name = tensor.name or "<unnamed>"
        where = f"external data location {location!r} of tensor '{name}'"
        if not isinstance(name, str):
            raise GraphfixError("an external-data tensor's name is not valid UTF-8", str(p))
        if not all(isinstance(e.key, str) and isinstance(e.value, str) for e in tensor.external_data):
            raise GraphfixError(f"an external-data entry (key or value) of tensor '{name}' is not valid UTF-8", str(p))
        if not location:
            raise GraphfixError(f"tensor '{name}' is marked external but names no location", str(p))
        if os.path.isabs(location) or Path(location).drive:
            raise GraphfixError(f"{where} is an absolute path; ONNX locations are relative to the model's folder", str(p))
        norm = os.path.normpath(location)
        if norm == ".." or norm.startswith(".." + os.sep) or norm.startswith("../"):
            raise GraphfixError(f"{where} is outside the model's folder", str(p))
        try:
            offset, length = int(info.get("offset", 0) or 0), (int(info["length"]) if info.get("length") else None)
        except ValueError:
            raise GraphfixError(f"{where}: offset/length are not integers", str(p)) from None

        expected = tensor_bytes(tensor)
        if length is not None and expected is not None and length != expected:
            raise GraphfixError(f"{where}: length {length} does not match the tensor's dims {list(tensor.dims)} "
                                f"({expected} bytes)", str(p))
        file = folder / norm
        if not file.exists():
            raise GraphfixError(f"{where}: {file} does not exist", str(p))
        try:
            st = os.stat(file)
        except OSError as exc:
            raise GraphfixError(f"{where}: cannot read {file} ({first_line(exc)})", str(p)) from exc
        if not stat.S_ISREG(st.st_mode):
            raise GraphfixError(f"{where}: {file} is not a regular file", str(p))
        end = offset + (length or 0)
        if offset < 0 or (length is not None and length < 0) or end > st.st_size:
            raise GraphfixError(f"{where}: {file} is {st.st_size} bytes, the tensor needs bytes {offset}..{end}", str(p))
        found.append(ExternalTensor(name, location, file, offset, length if length is not None else st.st_size - offset))
    return found


def _mentions_location(p: Path) -> bool:
    """Cheap pre-check: an external tensor carries the key "location" (bytes 0a 08 'location').
    Searched in a memory map (one C-level scan, no copies of the file): 0.17 s for 400 MB, where
    parsing the model and walking its tensors took 0.55 s."""
    needle = b"\x0a\x08location"
    with open(p, "rb") as fh:
        if os.fstat(fh.fileno()).st_size < len(needle):
            return False
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return view.find(needle) >= 0


def _external_tensors(model: onnx.ModelProto) -> Iterable[onnx.TensorProto]:
    from onnx.external_data_helper import _get_all_tensors  # walks initializers, attributes, subgraphs

    for t in _get_all_tensors(model):
        if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL:
            yield t


def check_inputs_file(path: str | os.PathLike) -> Path:
    """``--load-inputs``: a regular file, at most MAX_INPUTS_BYTES, an ``.npz`` no bigger unpacked."""
    p = check_readable(path, "--load-inputs file", MAX_INPUTS_BYTES)
    if p.suffix == ".npz":
        try:
            with zipfile.ZipFile(p) as z:
                unpacked = sum(i.file_size for i in z.infolist())
        except (zipfile.BadZipFile, OSError) as exc:
            raise GraphfixError(f"cannot read inputs ({first_line(exc)})", str(p)) from exc
        if unpacked > MAX_INPUTS_BYTES:
            raise GraphfixError(f"inputs unpack to {gib(unpacked)}; graphfix loads at most {gib(MAX_INPUTS_BYTES)}", str(p))
    return p


# ------------------------------------------------------------------------------ writes
def check_writable(path: str | os.PathLike, role: str) -> Path:
    """A regular file or nothing yet, in an existing folder graphfix can create files in, with a
    name the filesystem takes (and room beside it for the temp file graphfix renames into place)."""
    p = Path(path)
    if str(path).endswith(os.sep):
        raise GraphfixError(f"{role} path is a directory", str(p))
    try:
        _check_name(p, role, p)
        target = writable_target(p, role)
        if target != p:
            _check_name(target, role, p)
    except OSError as exc:  # a path too long, a folder we may not search
        raise GraphfixError(f"cannot write {role} ({first_line(exc)})", str(p)) from exc
    _probe(target.parent, role, p)
    return p


def _check_name(target: Path, role: str, p: Path) -> None:
    """The target's name, and the temp name beside it, fit the filesystem's limit."""
    try:
        limit = os.pathconf(target.parent if target.parent.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(target.name))
    if size > limit:
        raise GraphfixError(f"{role} file name is {size} bytes; the filesystem allows at most {limit}", str(p))
    if aux_name_bytes(target.name) > limit:
        raise GraphfixError(f"{role} file name leaves no room for graphfix's temp file beside it "
                            f"(the filesystem allows {limit} bytes)", str(p))


def _probe(folder: Path, role: str, p: Path) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".graphfix-probe-", dir=folder)
    except OSError as exc:
        raise GraphfixError(f"{role} directory {folder} is not writable ({first_line(exc)})", str(p)) from exc
    os.close(fd)
    os.unlink(name)


#: What a report's extension selects (anything else would be written as JSON, its side files
#: named after a stem the user did not expect).
REPORT_FORMATS = {".json": "JSON, plus polygraphy inputs/outputs files", ".md": "Markdown",
                  ".html": "HTML, one self-contained page"}


def check_report_format(report: str | os.PathLike) -> None:
    suffix = Path(report).suffix
    if suffix not in REPORT_FORMATS:
        accepted = ", ".join(f"{k} ({v})" for k, v in REPORT_FORMATS.items())
        got = f"'{suffix}'" if suffix else "no extension"
        raise GraphfixError(f"--report: the extension selects the format; {got} is not one of {accepted}", str(report))


def sidecars(report: str | os.PathLike) -> list[Path]:
    """The polygraphy files a JSON report gets beside it (none for ``.md``/``.html``)."""
    if Path(report).suffix in (".md", ".html"):
        return []
    stem = Path(report).with_suffix("")
    return [Path(f"{stem}.inputs.json"), Path(f"{stem}.outputs.json")]


def default_data_name(output: str | os.PathLike) -> str:
    """Where a model too big for one file puts its weights: ``<output>.data`` beside it."""
    return Path(output).name + ".data"


def data_path(output: str | os.PathLike, name: str | None) -> Path:
    """The external-data file of the output, named relative to the output's folder."""
    out = Path(output)
    if name is None:
        return out.parent / default_data_name(out)
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm == ".." or norm.startswith(".." + os.sep):
        raise GraphfixError(f"--external-data {name!r} is outside the output's folder; ONNX locations are relative to the model", name)
    return out.parent / norm


# ------------------------------------------------------------------------------ collisions
def _identity(p: Path) -> set[object]:
    """Every key under which two spellings are the same file."""
    keys: set[object] = {os.path.normpath(os.path.abspath(p)), os.path.realpath(p)}
    try:
        st = os.stat(p)
        keys.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    return keys


def check_collisions(plan: Plan) -> None:
    seen: list[tuple[Use, set[object], bool]] = [(u, _identity(u.path), False) for u in plan.reads]
    for w in plan.writes:
        keys = _identity(w.path)
        for other, other_keys, is_write in seen:
            if keys & other_keys:
                raise GraphfixError(_collision(w, other, is_write), str(w.path))
        seen.append((w, keys, True))


def _collision(w: Use, other: Use, is_write: bool) -> str:
    if is_write:
        return f"{w.role} and {other.role} are the same file: every file graphfix writes needs its own path"
    same = "" if w.path == other.path else f" ({other.path})"
    return f"{w.role} would overwrite the {other.role}{same}; graphfix never overwrites its input"


# ------------------------------------------------------------------------------ batches
def batch_names(source: str | os.PathLike, out_dir: str | os.PathLike, reports: Sequence[str]) -> tuple[Path, list[Path]]:
    """Where ``--out-dir`` puts one model: ``DIR/<file name>``, its reports ``DIR/<stem>.<report name>``."""
    src = Path(source)
    return Path(out_dir) / src.name, [Path(out_dir) / f"{src.stem}.{Path(r).name}" for r in reports]


def _fold(p: Path) -> str:
    """One key for names a case-insensitive filesystem (macOS, Windows, SMB shares) stores as one
    file: ``model.onnx`` and ``model.ONNX``, and the composed and decomposed forms of ``é``."""
    return unicodedata.normalize("NFC", os.path.normpath(os.path.abspath(p))).casefold()


def check_batch(sources: Sequence[str], out_dir: str | os.PathLike, reports: Sequence[str], sidecar_files: bool = True) -> None:
    """Before any model of a batch is read: no two files of the batch get one name (models,
    reports, their polygraphy files; compared without case), and none lands on an input."""
    written: dict[str, tuple[str, Path]] = {}
    read = {key: src for src in sources for key in (_fold(Path(src)), *_identity(Path(src)))}
    for src in sources:
        output, named = batch_names(src, out_dir, reports)
        files = [output, *named, *(s for r in named if sidecar_files for s in sidecars(r))]
        for f in files:
            key = _fold(f)
            other = next((read[k] for k in (key, *_identity(f)) if k in read), None)
            if other is not None:
                raise GraphfixError(f"--out-dir: {src} would write {f}, which is the input {other}; graphfix never "
                                    "overwrites its input")
            if key in written:
                first, path = written[key]
                same = "" if path.name == f.name else " (names that differ only in case are one file on case-insensitive filesystems)"
                raise GraphfixError(f"--out-dir: {first} and {src} would collide: both write {path if same else f}{same}; "
                                    "rename one of the inputs")
            written[key] = (src, f)


# ------------------------------------------------------------------------------ the plan
def read_plan(model: str | os.PathLike) -> Plan:
    """The model and its external data, checked (used by every command that reads a model)."""
    p = check_model_file(model)
    st = p.stat()
    files = _external_files(str(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    return Plan([Use("input model", p), *(Use(f"input model's external data {f.name}", f) for f in files)])


@functools.lru_cache(maxsize=8)
def _external_files(path: str, dev: int, ino: int, size: int, mtime_ns: int) -> tuple[Path, ...]:
    """Checked once per version of the file: a run plans, then loads, the same model."""
    p = Path(path)
    tensors = external_data(p)
    return tuple(dict.fromkeys(t.file for t in tensors))


def plan_fix(
    model: str | os.PathLike | None,
    output: str | os.PathLike | None = None,
    reports: Sequence[str | os.PathLike] = (),
    *,
    load_inputs: str | os.PathLike | None = None,
    engine: str | os.PathLike | None = None,
    external_data: str | None = None,
    sidecar_files: bool = True,
) -> Plan:
    """Everything ``graphfix fix`` reads and writes, refused now if anything would go wrong."""
    plan = read_plan(model) if model is not None else Plan()
    input_has_weights = len(plan.reads) > 1
    if load_inputs is not None:
        plan.reads.append(Use("--load-inputs file", check_inputs_file(load_inputs)))
    if output is not None:
        plan.writes.append(Use("the output", check_writable(output, "output")))
        data = data_path(output, external_data)
        if external_data is not None or input_has_weights:  # it will be written
            check_writable(data, "external data")
        plan.writes.append(Use(f"the output's external data {data.name}", data))
    for r in reports:
        plan.writes.append(Use(f"--report {r}", check_writable(r, "report")))
        if sidecar_files:
            plan.writes += [Use(f"{s} (polygraphy file of --report {r})", check_writable(s, "report")) for s in sidecars(r)]
    if engine is not None:
        plan.writes.append(Use(f"--build {engine}", check_writable(engine, "engine")))
    check_collisions(plan)
    for r in reports:  # after the collisions: "would overwrite the input" says more than the extension
        check_report_format(r)
    return plan
