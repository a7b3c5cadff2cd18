"""`kai-ray dashboard install-plugin` / `uninstall-plugin`: put kai-ray's head module
(kai_ray.ray.dashboard_head) where Ray's dashboard looks for modules, or take it away.
Ray's dashboard loads modules when it starts: restart the Ray head after either."""

from __future__ import annotations

from pathlib import Path

__all__ = ["PLUGIN_PACKAGE", "install_plugin", "plugin_dir", "uninstall_plugin"]

PLUGIN_PACKAGE = "kai_ray_plugin"
MARK = "# Installed by `kai-ray dashboard install-plugin`; `kai-ray dashboard uninstall-plugin` removes it."
_MODULE = f"""{MARK}
from kai_ray.ray.dashboard_head import KaiRayHead  # noqa: F401  (Ray's dashboard finds the subclass)
"""


def plugin_dir() -> Path:
    """Where the plugin goes: a package inside ray.dashboard.modules."""
    import ray.dashboard.modules

    return Path(next(iter(ray.dashboard.modules.__path__))) / PLUGIN_PACKAGE


def install_plugin() -> Path:
    """Write the plugin package; returns its folder. Raises PermissionError (with the
    folder named) when Ray's package cannot be written to."""
    where = plugin_dir()
    try:
        where.mkdir(exist_ok=True)
        (where / "__init__.py").write_text(f"{MARK}\n")
        (where / "kai_ray_head.py").write_text(_MODULE)
    except PermissionError as exc:
        raise PermissionError(
            f"cannot write the kai-ray plugin into {where} ({exc.strerror}); run the command as the "
            "user who installed Ray, or in the virtual environment Ray runs from"
        ) from None
    return where


def uninstall_plugin() -> bool:
    """Remove the plugin package; False when it was not installed. Refuses a folder
    of that name that this command did not write."""
    where = plugin_dir()
    if not where.exists():
        return False
    init = where / "__init__.py"
    if not init.is_file() or MARK not in init.read_text():
        raise FileExistsError(f"{where} was not written by `kai-ray dashboard install-plugin`; leaving it")
    for path in sorted(where.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    where.rmdir()
    return True
