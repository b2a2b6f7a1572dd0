"""The results root and catalog every verb that reads or writes sweeps shares: `--root` and
`--storage`, declared and checked before a verb runs (the catalog they name is opened by
shapesweep.sweep.verbs.store_access). Light on purpose: `--help` is built from here."""

from __future__ import annotations

from dataclasses import dataclass

from shapesweep.common import DEFAULT_ROOT, UserError
from shapesweep.sweep.options.fields import option


@dataclass(kw_only=True)
class StoreOptions:
    """Where sweeps are kept: every verb that reads or writes a results root takes both
    (`same_as(StoreOptions, ...)`)."""

    root: str = option(DEFAULT_ROOT, "--root", help=f"results root (default {DEFAULT_ROOT})",
                       resume=True, saved=False)  # not saved: a moved root resumes
    storage: str | None = option(None, "--storage", resume=True,
                                 help="SQLAlchemy URL of the catalog + Optuna storage "
                                 "(default sqlite:///ROOT/shapesweep.db)")


# URL schemes pyarrow opens as a results root (`pyarrow.fs.FileSystem.from_uri`)
ROOT_SCHEMES = ("file", "local", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
# SQLAlchemy's PostgreSQL drivers, each with the module it imports and how to install it
POSTGRES_DRIVERS = {"psycopg": ("psycopg", "psycopg[binary]"),
                    "psycopg2": ("psycopg2", "psycopg2-binary")}


# the package that installs a DBAPI module SQLAlchemy's dialects import, where the names differ
DBAPI_PACKAGES = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "mysql": "mysql-connector-python",
                  "psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "cx_Oracle": "cx-Oracle",
                  "pymssql": "pymssql", "pyodbc": "pyodbc", "oracledb": "oracledb",
                  "asyncpg": "asyncpg", "aiosqlite": "aiosqlite", "mariadb": "mariadb", "pg8000": "pg8000"}


def check_store_args(args: object) -> None:
    """A verb's `--root` and `--storage` checked before it starts (the CLI calls this for
    every verb that has them): an unknown root scheme is one line, not pyarrow's error, and a
    PostgreSQL URL without a driver gets the one that is installed."""
    root = getattr(args, "root", None)
    if isinstance(root, str):
        check_root(root)
    storage = getattr(args, "storage", None)
    if isinstance(storage, str):
        setattr(args, "storage", with_installed_driver(storage))  # noqa: B010 - any verb's arguments


def check_root(root: str) -> str:
    """`root` when pyarrow can open it: a path, or a URL of a scheme it knows."""
    scheme, sep, _ = root.partition("://")
    if sep and scheme.lower() not in ROOT_SCHEMES:
        raise UserError(f"unknown storage scheme {scheme!r} in {root!r} (a results root is a "
                        f"folder or a URL: {', '.join(s + '://' for s in ROOT_SCHEMES)})",
                        key="--root")
    return root


def with_installed_driver(url: str) -> str:
    """The URL whose SQLAlchemy dialect's driver (DBAPI) is installed: `postgresql://...`
    names SQLAlchemy's default driver, which may not be the one installed (SQLAlchemy 2.1:
    psycopg 3), so the installed one is named instead; any URL whose driver is missing is one
    line naming the package to install (`mysql://` without mysqlclient), not the import's
    traceback from the first connect. A URL SQLAlchemy cannot read is returned as given (the
    catalog says what is wrong with it)."""
    import importlib.util

    from sqlalchemy.engine import make_url

    scheme, sep, rest = url.partition("://")
    if not sep or "://" not in url:
        return url
    try:
        dialect = make_url(url).get_dialect()
    except Exception:  # noqa: BLE001 - the catalog says what is wrong with the URL
        return url
    if scheme.lower() == "postgresql":
        installed = [driver for driver, (module, _) in POSTGRES_DRIVERS.items()
                     if importlib.util.find_spec(module) is not None]
        if dialect.driver not in installed and dialect.driver in POSTGRES_DRIVERS:
            if installed:
                return f"postgresql+{installed[0]}://{rest}"
            raise UserError(f"{url.partition('@')[2] or 'postgresql'}: no PostgreSQL driver is "
                            f"installed: pip install {POSTGRES_DRIVERS[dialect.driver][1]} (or "
                            "name the one you have, e.g. postgresql+psycopg2://...)", key="--storage")
    try:
        dialect.import_dbapi()
    except ImportError as error:
        module = (error.name or str(error)).split(".")[0]
        package = DBAPI_PACKAGES.get(module, module)
        raise UserError(f"{scheme}: its driver {module!r} is not installed: pip install {package} "
                        f"(or name one you have, e.g. {scheme.partition('+')[0]}+DRIVER://...)",
                        key="--storage") from None
    return url
