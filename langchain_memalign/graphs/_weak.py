"""Graph nodes that do not keep their judge alive.

LangChain and LangGraph cache the callables they inspect (in `lru_cache`s).
A bound method there would pin its object, and with it the judge's memory
and FAISS index, long after the judge is dropped. Nodes are therefore plain
functions that reach their object through a weak reference, and the graph
does not keep the object alive: whoever builds the graph owns the node
object and keeps it while the graph is used (`MemAlignJudge` keeps the
nodes of its graphs). A node whose object is gone raises `RuntimeError`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import run_in_executor


def weak_node(node: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """A plain function with `node`'s calling convention, calling it weakly.

    `node`: a bound method, or an object called as one (a step class's `__call__`).
    `name`: the function's name (by default the method's), which a route's run takes
    in traces; a node's run takes the node's name instead.
    """
    step: Any = node  # a step object's bound `__call__` is what a weak reference can hold
    method: Callable[..., Any] = node if inspect.ismethod(node) else step.__call__
    ref = weakref.WeakMethod(method)
    label = name if name is not None else str(getattr(method, "__name__", "node"))

    def target() -> Callable[..., Any]:
        bound = ref()
        if bound is None:
            raise RuntimeError(
                f"node {label!r} belongs to a judge that no longer exists: keep the judge "
                "while its graphs are used"
            )
        return bound

    takes_config = "config" in inspect.signature(method).parameters
    fn: Callable[..., Any]
    if inspect.iscoroutinefunction(method):
        if takes_config:

            async def fn(state: Any, config: RunnableConfig) -> Any:
                return await target()(state, config)
        else:

            async def fn(state: Any) -> Any:
                return await target()(state)
    elif takes_config:

        def fn(state: Any, config: RunnableConfig) -> Any:
            return target()(state, config)
    else:

        def fn(state: Any) -> Any:
            return target()(state)

    fn.__name__ = fn.__qualname__ = label
    fn.__doc__ = method.__doc__
    return fn


class _WeakNode(Runnable[Any, Any]):
    """A graph node calling a sync function and an optional async twin (`weak_runnable`).

    LangGraph opens the node's run (named after the node) and sets the config context
    around `invoke`; a `RunnableLambda` here would open a second run of the same name
    inside it and inspect the function's signature on every call (about 0.1 ms a node,
    five nodes a judgment), so the node calls its function directly.
    """

    def __init__(
        self, func: Callable[..., Any], afunc: Callable[..., Any] | None, name: str
    ) -> None:
        self.func = func
        self.afunc = afunc
        self.name = name
        self._takes_config = "config" in inspect.signature(func).parameters
        self._async_takes_config = (
            afunc is not None and "config" in inspect.signature(afunc).parameters
        )

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self._takes_config:
            return self.func(input, ensure_config(config))
        return self.func(input)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if self.afunc is None:
            # As `RunnableLambda` without an async twin: the sync function in a thread.
            return await run_in_executor(config, self.invoke, input, config)
        if self._async_takes_config:
            return await self.afunc(input, ensure_config(config))
        return await self.afunc(input)


def weak_runnable(
    method: Callable[..., Any], amethod: Callable[..., Any] | None = None
) -> Runnable[Any, Any]:
    """A graph node with a sync and an optional async implementation, both held weakly.

    A small `Runnable` (`_WeakNode`): LangGraph's own node wrapper, which takes a
    sync/async pair, is internal (`langgraph._internal`).
    """
    func = weak_node(method)
    afunc = None if amethod is None else weak_node(amethod)
    return _WeakNode(func, afunc, func.__name__)
