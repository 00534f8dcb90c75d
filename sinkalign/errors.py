"""The errors sinkalign raises for problems a user can fix.

Every class here is a :class:`SinkalignError`. The command-line interface turns these (and
only these) into a one-line ``Error: ...`` message with exit status 1; any other exception is
a bug and keeps its traceback. Most are also :class:`ValueError` (or the matching built-in),
so code written against the plain built-ins keeps working::

    try:
        records = list(sa.read_fasta("query.fasta"))  # read_fasta is lazy: list() reads it here
    except sa.InputError as err:      # also a ValueError
        print(err)                     # names file, record and position
"""

from __future__ import annotations

__all__ = [
    "Interrupted",
    "AlphabetError",
    "CheckpointError",
    "DependencyError",
    "DivergedError",
    "FormatError",
    "InputError",
    "MissingFileError",
    "OutputExistsError",
    "SinkalignError",
]


class SinkalignError(Exception):
    """Base class of every error a user can act on (bad input, missing extra, ...)."""


class InputError(SinkalignError, ValueError):
    """Bad input: an option value, a file's contents, a sequence. The message names which."""


class FormatError(InputError):
    """A file is not valid in the format it was read as (FASTA, Stockholm, PIR, shards, ...)."""


class AlphabetError(InputError):
    """Sequences of the wrong kind (DNA given to a protein model, a mixed file, ...)."""


class CheckpointError(SinkalignError, ValueError):
    """A model or run directory is missing, incomplete or inconsistent."""


class MissingFileError(SinkalignError, FileNotFoundError):
    """A file or directory the user named (or one an index or checkpoint lists) does not exist."""


class OutputExistsError(SinkalignError, FileExistsError):
    """An output already exists and the user did not ask to replace it."""


class DivergedError(SinkalignError, FloatingPointError):
    """A training run's loss became NaN or infinite; the message says at which step and what to change."""


class DependencyError(SinkalignError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


def require(module: str, extra: str, what: str):
    """Import ``module`` or raise :class:`DependencyError` naming the pip extra to install.

    ``what`` says what needed it (e.g. ``"sinkalign generate-dna"``).
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DependencyError(
            f"{what} needs {module.split('.')[0]}, which is not installed; install the "
            f"'{extra}' extra: pip install 'sinkalign[{extra}]'"
        ) from exc


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped a training run (:func:`sinkalign.utils.stop_on_signals`)
    after ``step``, with a checkpoint at ``checkpoint`` that ``--resume`` continues (both
    ``None`` when the signal came before the first step: nothing was saved). Not a user
    error: the command line prints how to resume and exits with :attr:`exit_status`."""

    def __init__(self, signum: int, step: int | None, checkpoint) -> None:
        import signal

        self.signum, self.step, self.checkpoint = int(signum), step, checkpoint
        self.signal_name = signal.Signals(self.signum).name
        if step is None:
            msg = f"training stopped by {self.signal_name} before its first step; nothing was saved"
        else:
            msg = f"training stopped by {self.signal_name} after step {step}; checkpoint {checkpoint}"
        super().__init__(msg)

    @property
    def exit_status(self) -> int:
        """The shell's status of a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum
