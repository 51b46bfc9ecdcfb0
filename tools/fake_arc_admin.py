"""The Actions-service calls ARC's *controller* makes, served by a `FakeActions` (mounted with
``FakeActions.mount``): runner groups, scale set get/create/update/delete, JIT runner configs,
runners get/delete. The auth chain these calls stand on (registration token, runner
registration, the App's installation token) and the listener's own calls (sessions, message
queue, acquire) are FakeActions' own routes.

Paths, methods and bodies are those of ARC's client (``github.com/actions/scaleset``, which
the gha-runner-scale-set controller 0.14 calls through its ``multiclient``):

* ``GET  _apis/runtime/runnergroups/?groupName=NAME`` -> ``{count, value: [RunnerGroup]}``;
  the controller needs exactly one (``Default`` when the scale set names no group);
* ``GET  _apis/runtime/runnerscalesets?runnerGroupId=ID&name=NAME`` -> ``{count, value}``
  (0 or 1 scale set; more is an error to the client);
* ``POST _apis/runtime/runnerscalesets`` (a RunnerScaleSet) -> the created one (200);
* ``PATCH _apis/runtime/runnerscalesets/ID`` (only the changed fields) -> the scale set (200);
* ``DELETE _apis/runtime/runnerscalesets/ID`` -> 204;
* ``POST _apis/runtime/runnerscalesets/ID/generatejitconfig`` (``{name, workFolder}``) ->
  ``{runner: RunnerReference, encodedJITConfig}``; a name already registered is
  ``AgentExistsException``;
* ``GET  _apis/distributedtask/pools/0/agents/ID`` and ``...agents?agentName=NAME``;
* ``DELETE _apis/distributedtask/pools/0/agents/ID`` -> 204, also for a runner already gone,
  or 400 ``JobStillRunningException`` while the runner runs a job (the client matches the
  type name). Idempotent because the controller removes an idle runner twice when a scale
  set goes (the EphemeralRunnerSet's clean-up, then the EphemeralRunner's finalizer) and
  retries any answer but 204 for ever: a 404 there would keep the scale set from going.

Every call needs the admin token (``api-version`` and a Bearer token FakeActions issued).
A deleted scale set stays in ``FakeActions.scale_sets`` (a listener that still holds its
session can end it) but is no longer found by name or id here; ``deleted`` lists it.
"""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tools.fake_actions import FakeActions, JobState, actions_exception
from tools.fake_http import Reject, json_response

DEFAULT_GROUP = "Default"


@dataclass
class RunnerGroup:
    id: int
    name: str


@dataclass
class ArcAdmin:
    """The controller-facing half of the Actions service, on one FakeActions.

    ``first_scale_set_id``: ids the fake hands out for created scale sets, counting up."""

    fake: FakeActions
    groups: list[RunnerGroup] = field(default_factory=lambda: [RunnerGroup(1, DEFAULT_GROUP)])
    first_scale_set_id: int = 1
    deleted: list[int] = field(default_factory=list)
    jit_configs: list[tuple[int, str]] = field(default_factory=list)  # (scale set id, runner)
    removed_runners: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ids = itertools.count(self.first_scale_set_id)
        self.fake.mount(self._register)

    # ------------------------------------------------------------------ routes

    def _register(self, app: web.Application) -> None:
        svc = f"/{self.fake.tenant}/_apis"
        sets = f"{svc}/runtime/runnerscalesets"
        agents = f"{svc}/distributedtask/pools/0/agents"
        # The client joins "runnergroups/" with a trailing slash; accept both spellings.
        app.router.add_get(f"{svc}/runtime/runnergroups/", self._groups, name="arc_groups")
        app.router.add_get(f"{svc}/runtime/runnergroups", self._groups, name="arc_groups_bare")
        app.router.add_get(sets, self._find_scale_set, name="arc_find_scale_set")
        app.router.add_post(sets, self._create_scale_set, name="arc_create_scale_set")
        one = f"{sets}/{{scale_set_id:[0-9]+}}"
        app.router.add_patch(one, self._update_scale_set, name="arc_update_scale_set")
        app.router.add_delete(one, self._delete_scale_set, name="arc_delete_scale_set")
        app.router.add_post(f"{one}/generatejitconfig", self._jit_config, name="arc_jit_config")
        app.router.add_get(agents, self._find_runner, name="arc_find_runner")
        app.router.add_get(f"{agents}/{{runner_id:[0-9]+}}", self._get_runner, name="arc_runner")
        app.router.add_delete(
            f"{agents}/{{runner_id:[0-9]+}}", self._remove_runner, name="arc_remove_runner"
        )

    # ------------------------------------------------------------------ helpers

    def _admin(self, request: web.Request) -> None:
        # FakeActions' own check: the admin token runner-registration handed out.
        self.fake._require_admin(request)

    def _group(self, group_id: int) -> RunnerGroup | None:
        return next((g for g in self.groups if g.id == group_id), None)

    def live_ids(self) -> list[int]:
        return [i for i in self.fake.scale_sets if i not in self.deleted]

    def _scale_set(self, request: web.Request) -> int:
        scale_set_id = int(request.match_info["scale_set_id"])
        if scale_set_id not in self.live_ids():
            raise _not_found(
                "RunnerScaleSetNotFoundException", "The runner scale set was not found."
            )
        return scale_set_id

    def _json(self, scale_set_id: int) -> dict[str, Any]:
        return self.fake._scale_set_json(self.fake.scale_sets[scale_set_id])

    def _runner(self, runner_id: int) -> tuple[int, str] | None:
        for scale_set_id in self.live_ids():
            for name, rid in self.fake.scale_sets[scale_set_id].runners.items():
                if rid == runner_id:
                    return scale_set_id, name
        return None

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError as exc:
            raise _bad("ArgumentException", "body is not JSON") from exc
        if not isinstance(body, dict):
            raise _bad("ArgumentException", "body must be an object")
        return body

    # ------------------------------------------------------------------ runner groups

    async def _groups(self, request: web.Request) -> web.Response:
        self._admin(request)
        wanted = request.query.get("groupName", "")
        found = [g for g in self.groups if g.name.lower() == wanted.lower()]
        value = [
            {"id": g.id, "name": g.name, "size": 0, "isDefaultGroup": g.name == DEFAULT_GROUP}
            for g in found
        ]
        return json_response({"count": len(value), "value": value})

    # ------------------------------------------------------------------ scale sets

    async def _find_scale_set(self, request: web.Request) -> web.Response:
        self._admin(request)
        try:
            group_id = int(request.query["runnerGroupId"])
            name = request.query["name"]
        except (KeyError, ValueError) as exc:
            raise _bad("ArgumentException", "runnerGroupId and name are required") from exc
        value = [
            self._json(i)
            for i in self.live_ids()
            if self.fake.scale_sets[i].name == name
            and self.fake.scale_sets[i].runner_group_id == group_id
        ]
        return json_response({"count": len(value), "value": value})

    async def _create_scale_set(self, request: web.Request) -> web.Response:
        self._admin(request)
        body = await self._body(request)
        name = body.get("name")
        group = self._group(int(body.get("runnerGroupId") or 0))
        if not isinstance(name, str) or not name or group is None:
            raise _bad("ArgumentException", "name and an existing runnerGroupId are required")
        for i in self.live_ids():
            existing = self.fake.scale_sets[i]
            if existing.name == name and existing.runner_group_id == group.id:
                raise _bad(
                    "RunnerScaleSetExistsException", f"A runner scale set {name} already exists."
                )
        labels = [str(label.get("name")) for label in body.get("labels") or []]
        scale_set = self.fake.add_scale_set(next(self._ids), name, labels or None)
        scale_set.runner_group_id = group.id
        scale_set.runner_group_name = group.name
        return json_response(self._json(scale_set.id))

    async def _update_scale_set(self, request: web.Request) -> web.Response:
        self._admin(request)
        scale_set_id = self._scale_set(request)
        body = await self._body(request)
        scale_set = self.fake.scale_sets[scale_set_id]
        if body.get("runnerGroupId"):
            group = self._group(int(body["runnerGroupId"]))
            if group is None:
                raise _bad("ArgumentException", "runnerGroupId does not exist")
            scale_set.runner_group_id = group.id
            scale_set.runner_group_name = group.name
        if body.get("name"):
            scale_set.name = str(body["name"])
        if body.get("labels"):
            scale_set.labels = tuple(str(label.get("name")) for label in body["labels"])
        return json_response(self._json(scale_set_id))

    async def _delete_scale_set(self, request: web.Request) -> web.Response:
        self._admin(request)
        self.deleted.append(self._scale_set(request))
        return web.Response(status=204)

    # ------------------------------------------------------------------ runners

    async def _jit_config(self, request: web.Request) -> web.Response:
        self._admin(request)
        scale_set_id = self._scale_set(request)
        body = await self._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _bad("ArgumentException", "name is required")
        if name in self.fake.scale_sets[scale_set_id].runners:
            raise _bad("AgentExistsException", f"A runner named {name} already exists.")
        runner_id = self.fake.register_runner(scale_set_id, name)
        self.jit_configs.append((scale_set_id, name))
        config = {"name": name, "id": runner_id, "workFolder": body.get("workFolder", "")}
        encoded = base64.b64encode(json.dumps(config).encode()).decode()
        reference = {"id": runner_id, "name": name, "runnerScaleSetId": scale_set_id}
        return json_response({"runner": reference, "encodedJITConfig": encoded})

    async def _get_runner(self, request: web.Request) -> web.Response:
        self._admin(request)
        runner_id = int(request.match_info["runner_id"])
        found = self._runner(runner_id)
        if found is None:
            raise _not_found("AgentNotFoundException", f"No runner with id {runner_id}.")
        return json_response({"id": runner_id, "name": found[1], "runnerScaleSetId": found[0]})

    async def _find_runner(self, request: web.Request) -> web.Response:
        self._admin(request)
        name = request.query.get("agentName", "")
        value = [
            {"id": rid, "name": runner, "runnerScaleSetId": i}
            for i in self.live_ids()
            for runner, rid in self.fake.scale_sets[i].runners.items()
            if runner == name
        ]
        return json_response({"count": len(value), "value": value})

    async def _remove_runner(self, request: web.Request) -> web.Response:
        self._admin(request)
        runner_id = int(request.match_info["runner_id"])
        found = self._runner(runner_id)
        if found is None:
            return web.Response(status=204)
        scale_set_id, name = found
        if any(j.runner_name == name for j in self.fake.jobs_of(scale_set_id, JobState.RUNNING)):
            raise _bad("JobStillRunningException", f"Runner {name} is running a job.")
        self.fake.unregister_runner(scale_set_id, name)
        self.removed_runners.append(runner_id)
        return web.Response(status=204)


def _bad(type_key: str, message: str) -> Reject:
    return Reject(json_response(actions_exception(type_key, message), status=400))


def _not_found(type_key: str, message: str) -> Reject:
    return Reject(json_response(actions_exception(type_key, message), status=404))
