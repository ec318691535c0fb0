"""The running daemon's configuration: runtime keys and engine flags that change while it serves.

:class:`RuntimeConfig` holds the current :class:`~syshaxd.config.Config` and each engine's
``enabled``/``draining`` flags. Changes arrive as flat patches of dotted keys (PATCH
/v1/config, ``syshax set``), are validated as a whole and applied all or nothing, and are
announced to subscribers as :class:`~syshaxd.schema.ConfigChangeModel`. ``save`` writes the
runtime values that differ from the admin's file, and the engine flags that differ from the
default, into the overrides file; ``reload`` rereads both files and applies only what may
change at run time (runtime keys and engine flags).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from syshaxd.config.apikeys import unknown_key_rule
from syshaxd.config.classes import ServiceLevels, reachable
from syshaxd.config.dotted import get_dotted, set_dotted
from syshaxd.config.edits import runtime_values, save_overrides
from syshaxd.config.files import ConfigError
from syshaxd.config.flags import ENGINE_FLAGS, EngineFlags
from syshaxd.config.keys import suggest
from syshaxd.config.layers import OVERRIDES_NAME, LoadedConfig, default_state_dir, load_config
from syshaxd.config.model import RUNTIME_KEYS, Config, Decider, all_keys
from syshaxd.routing import Handoff, Limits
from syshaxd.schema import ConfigChangeModel

log = logging.getLogger("syshaxd.runtime")

__all__ = ["UNSAVED", "PatchError", "RuntimeConfig", "limits_of"]

UNSAVED = "runtime (not saved)"

ChangeCallback = Callable[[ConfigChangeModel], None]
Loader = Callable[[bool], LoadedConfig]


def limits_of(decider: Decider, handoff: Handoff = "recompute") -> Limits:
    """The policy's :class:`~syshaxd.routing.Limits` from the ``decider`` section (and the handoff)."""
    return Limits(
        handoff=handoff,
        max_num_seqs=decider.max_num_seqs,
        gpu_max_batch_size=decider.gpu_max_batch_size,
        cpu_max_batch_size=decider.cpu_max_batch_size,
        gpu_cache_threshold=decider.gpu_cache_threshold,
        cpu_throughput_threshold=decider.cpu_throughput_threshold,
        token_limit_multiplier=decider.token_limit_multiplier,
        token_limit_min=decider.token_limit_min,
        token_limit_max=decider.token_limit_max,
        auto_pd_offload=decider.auto_pd_offload,
        ttft_target=decider.ttft_target,
        tpot_target=decider.tpot_target,
    )


class PatchError(Exception):
    """A rejected patch: the first bad key and why (the control API's 422)."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


class RuntimeConfig:
    """The current config plus engine flags, changed by patches, saves and reloads."""

    def __init__(
        self,
        loaded: LoadedConfig,
        engine_names: Iterable[str] = (),
        *,
        loader: Loader | None = None,
    ) -> None:
        """Start from a loaded config.

        Args:
            loaded: the config as the daemon started with it (engine flags included).
            engine_names: the configured engines (``engines.<name>.*`` keys).
            loader: rereads the files; called with ``use_overrides``. Default: the same
                config file and overrides file as ``loaded``.
        """
        self._config = loaded.config
        self._path = loaded.path
        self._overrides_path = loaded.overrides_path
        self._sources = dict(loaded.sources)
        self._flags = {name: loaded.engine_flags.get(name, EngineFlags()) for name in engine_names}
        self._callbacks: list[ChangeCallback] = []
        self._loader = loader or self._default_loader
        self._fastest_tpot: Callable[[], Mapping[str, float]] | None = None
        #: The overrides written by the last ``save`` (key -> value).
        self.last_saved: dict[str, Any] = {}
        #: The engine flags written by the last ``save`` (name -> both flags).
        self.last_saved_engines: dict[str, dict[str, bool]] = {}

    def _default_loader(self, use_overrides: bool) -> LoadedConfig:
        return load_config(self._path, overrides_path=self._overrides_path, use_overrides=use_overrides)

    # ---- reading --------------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The current configuration (immutable snapshot: patches replace it)."""
        return self._config

    @property
    def policy_name(self) -> str:
        """The active policy's name."""
        return self._config.decider.policy

    def limits(self) -> Limits:
        """The decider's settings as the policy sees them."""
        return limits_of(self._config.decider, self._config.services.gpu.handoff)

    def service(self) -> ServiceLevels:
        """The service classes and rules now."""
        return self._config.service

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        """``(enabled, draining)`` of an engine (unknown engines are enabled, not draining)."""
        flags = self._flags.get(name, EngineFlags())
        return flags.enabled, flags.draining

    def values(self) -> dict[str, Any]:
        """The runtime keys and their current values."""
        return runtime_values(self._config)

    def sources(self) -> dict[str, str]:
        """Where each runtime key's value came from: default, file, overrides, env, runtime."""
        return {key: self._sources.get(key, "default") for key in sorted(RUNTIME_KEYS)}

    @property
    def overrides_path(self) -> Path:
        """The overrides file that ``save`` writes."""
        if self._overrides_path is not None:
            return self._overrides_path
        state_dir = self._config.control.state_dir or default_state_dir()
        return Path(state_dir) / OVERRIDES_NAME

    # ---- subscribing ----------------------------------------------------------------

    def on_change(self, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback`` after every applied change; returns a function that unsubscribes."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def _announce(self, change: ConfigChangeModel) -> None:
        for callback in list(self._callbacks):
            try:
                callback(change)
            except Exception:  # a broken listener must not undo or block a change
                log.exception("config change listener failed")

    # ---- patching -------------------------------------------------------------------

    def apply_patch(self, body: Mapping[str, Any]) -> ConfigChangeModel:
        """Validate and apply a flat patch of dotted keys, all or nothing.

        Raises:
            PatchError: for the first bad key; nothing has changed then.
        """
        if not isinstance(body, Mapping):
            raise PatchError("(body)", "expected a JSON object of dotted keys, e.g. {\"decider.cpu_max_batch_size\": 24}")
        if not body:
            raise PatchError("(body)", "empty patch: give at least one key to change")
        config_updates: dict[str, Any] = {}
        flag_updates: dict[str, dict[str, bool]] = {}
        for key, value in body.items():
            if not isinstance(key, str):
                raise PatchError(str(key), "keys must be strings")
            if key.startswith("engines."):
                name, flag = self._check_flag_key(key, value)
                flag_updates.setdefault(name, {})[flag] = value
            else:
                self._check_config_key(key)
                config_updates[key] = value
        new_config = self._validated(config_updates)
        self._check_service(config_updates, new_config)

        old_values = self.values()
        new_flags = dict(self._flags)
        for name, changes in flag_updates.items():
            current = new_flags[name]
            new_flags[name] = EngineFlags(
                enabled=changes.get("enabled", current.enabled),
                draining=changes.get("draining", current.draining),
            )
        # Everything is valid: swap in one step.
        self._config = new_config
        self._flags = new_flags
        new_values = self.values()
        changed = {k: v for k, v in new_values.items() if old_values.get(k) != v}
        for key in config_updates:
            self._sources[key] = UNSAVED
        engines = {name: f.as_dict() for name, f in new_flags.items() if name in flag_updates}
        change = ConfigChangeModel(changed=changed, engines=engines, source="patch")
        self._announce(change)
        return change

    def check_service_with(self, fastest_tpot: Callable[[], Mapping[str, float]]) -> None:
        """Refuse a class table no engine can serve: ``fastest_tpot`` gives each engine's measured
        seconds per token on its own (the daemon's monitor)."""
        self._fastest_tpot = fastest_tpot

    def _check_service(self, updates: Mapping[str, Any], config: Config) -> None:
        patched = next((key for key in updates if key.startswith("service.")), None)
        if patched is None:
            return
        # A section is revalidated alone (_validated): a rule's key is checked against the keys here.
        why = unknown_key_rule(config.service, config.services.conductor.named_keys())
        if why is None and self._fastest_tpot is not None:
            slow = reachable(config.service, self._fastest_tpot())
            why = None if slow is None else f"no engine can serve this class table: {slow}"
        if why is not None:
            raise PatchError(patched, f"{why}; the table in use is kept")

    def _check_flag_key(self, key: str, value: Any) -> tuple[str, str]:
        parts = key.split(".")
        names = sorted(self._flags)
        if len(parts) != 3:
            raise PatchError(key, "engine keys look like engines.<name>.enabled or engines.<name>.draining")
        _, name, flag = parts
        if name not in self._flags:
            hint = suggest(name, names)
            extra = f" (did you mean {hint!r}?)" if hint else ""
            raise PatchError(key, f"unknown engine {name!r}{extra}; engines: {', '.join(names) or 'none'}")
        if flag not in ENGINE_FLAGS:
            hint = suggest(flag, list(ENGINE_FLAGS))
            extra = f" (did you mean 'engines.{name}.{hint}'?)" if hint else ""
            raise PatchError(key, f"unknown engine flag {flag!r}{extra}; allowed: enabled, draining")
        if not isinstance(value, bool):
            raise PatchError(key, f"invalid value {value!r}: must be true or false")
        return name, flag

    def _check_config_key(self, key: str) -> None:
        known = all_keys()
        if key in RUNTIME_KEYS:
            return
        if key in known:
            raise PatchError(
                key,
                "not a runtime key: change it in the config file (syshax config KEY VALUE) and restart syshaxd",
            )
        choices = sorted(RUNTIME_KEYS) + [f"engines.{n}.{f}" for n in self._flags for f in ENGINE_FLAGS]
        hint = suggest(key, choices) or suggest(key, list(known))
        extra = f" (did you mean {hint!r}?)" if hint else ""
        raise PatchError(key, f"unknown key{extra}; runtime keys: {', '.join(sorted(RUNTIME_KEYS))}")

    def _validated(self, updates: Mapping[str, Any]) -> Config:
        """The current config with ``updates`` applied, each touched section revalidated."""
        if not updates:
            return self._config
        new_sections: dict[str, BaseModel] = {}
        for section, changes in _by_section(updates).items():
            current: BaseModel = getattr(self._config, section)
            data = current.model_dump()
            for rest, value in changes.items():
                set_dotted(data, rest, value)
            try:
                new_sections[section] = type(current).model_validate(data)
            except ValidationError as exc:
                raise _patch_error(exc, section, changes) from None
        return self._config.model_copy(update=new_sections)

    # ---- files ----------------------------------------------------------------------

    def save(self) -> Path:
        """Write the runtime values that differ from the admin's file, and the engine flags
        that differ from the default, to the overrides file.

        Keys equal to what the file (and environment) give are left out, so a later edit of
        the YAML file is not shadowed by a stale override.
        """
        baseline = runtime_values(self._loader(False).config)
        current = self.values()
        overrides = {k: v for k, v in current.items() if baseline.get(k) != v}
        path = self.overrides_path
        save_overrides(path, overrides, self._flags)
        self._overrides_path = path
        self.last_saved = overrides
        self.last_saved_engines = {n: f.as_dict() for n, f in sorted(self._flags.items()) if f.changed()}
        for key in current:
            if key in overrides:
                self._sources[key] = f"overrides {path}"
            elif self._sources.get(key, "").startswith(("overrides ", UNSAVED)):
                self._sources[key] = "default"
        self._announce(
            ConfigChangeModel(changed=overrides, engines=self.last_saved_engines, source="save", path=str(path))
        )
        return path

    def reload(self) -> ConfigChangeModel:
        """Reread the config file and the overrides; apply changed runtime keys and engine flags only.

        Keys that are not runtime keys and differ from the running config are listed in
        ``needs_restart`` and not applied. Unsaved patches are replaced by the files' values,
        engine flags included: an engine the overrides file does not name is enabled and not
        draining afterwards.

        Raises:
            ConfigError: a file is invalid; nothing has changed then.
        """
        loaded = self._loader(True)
        fresh = loaded.config
        why = unknown_key_rule(fresh.service, self._config.services.conductor.named_keys())
        if why is not None:  # the file's new keys wait for a restart; its rules would not
            raise ConfigError(f"{why} (in the running daemon: API keys change only on restart)", key="service.rules")
        needs_restart = sorted(
            key
            for key in all_keys()
            if key not in RUNTIME_KEYS and get_dotted(fresh, key) != get_dotted(self._config, key)
        )
        old_values, old_flags = self.values(), self._flags
        self._config = self._with_runtime_values(runtime_values(fresh))
        self._flags = {name: loaded.engine_flags.get(name, EngineFlags()) for name in old_flags}
        self._sources = {
            **{k: v for k, v in self._sources.items() if k not in RUNTIME_KEYS},
            **{k: v for k, v in loaded.sources.items() if k in RUNTIME_KEYS},
        }
        if loaded.overrides_path is not None:
            self._overrides_path = loaded.overrides_path
        changed = {k: v for k, v in self.values().items() if old_values.get(k) != v}
        engines = {n: f.as_dict() for n, f in self._flags.items() if f != old_flags[n]}
        change = ConfigChangeModel(changed=changed, engines=engines, needs_restart=needs_restart, source="reload")
        self._announce(change)
        return change

    def _with_runtime_values(self, values: Mapping[str, Any]) -> Config:
        # Revalidated, not copied in: a value read from a file is plain data (a class table is
        # a dict of dicts), and the running config holds models.
        return self._validated(values)


def _by_section(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"decider.policy": v}`` -> ``{"decider": {"policy": v}}`` (the rest of each key stays dotted)."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, _, rest = key.partition(".")
        out.setdefault(section, {})[rest] = value
    return out


def _patch_error(exc: ValidationError, section: str, changes: Mapping[str, Any]) -> PatchError:
    """Name the patched key and the reason from the first validation problem."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    reason = err["msg"]
    if reason.startswith("Value error, "):
        reason = reason[len("Value error, ") :]
    if loc:
        key = f"{section}.{'.'.join(loc)}"
        return PatchError(key, f"invalid value {err.get('input')!r}: {reason}")
    # A check across fields (token_limit_min <= token_limit_max): blame a patched key.
    key = f"{section}.{next(iter(changes))}"
    return PatchError(key, reason)
