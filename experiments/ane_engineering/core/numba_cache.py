"""numba's njit with its on-disk cache where numba can write one, and without it where it cannot.

`njit(cache=True)` picks a cache directory when a function is decorated, i.e. when its module is imported: the
directory numba.config.CACHE_DIR names (NUMBA_CACHE_DIR), the `__pycache__` beside the source file, then the
user-wide cache (~/.cache/numba through appdirs); it tries to create each and write a file there
(numba/core/caching.py, _CacheLocator.ensure_cache_path). When none is writable -- a read-only install run by a user
whose home is read-only -- it raises RuntimeError("cannot cache function ...: no locator available ...") and the
import fails. `cached_njit` compiles such a function without the cache instead: the same machine code, compiled
again in each process instead of loaded from disk.
"""

from __future__ import annotations

NO_LOCATOR = "no locator available"  # numba's message when no cache directory is writable


def cached_njit(**options):
    """Decorator: numba.njit(cache=True, **options), or numba.njit(**options) where no cache directory is writable."""
    from numba import njit

    def decorate(function):
        try:
            return njit(cache=True, **options)(function)
        except RuntimeError as error:
            if NO_LOCATOR not in str(error):
                raise
            return njit(**options)(function)

    return decorate
