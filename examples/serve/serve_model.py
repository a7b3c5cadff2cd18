"""The model behind examples/serve/rayservice.yaml: a Ray Serve application answering
`POST /` with a JSON list of 64 features by the model's 8 outputs (the model of
serve_app.py). Its replica asks for one GPU, so it runs on the service's GPU worker."""

from __future__ import annotations

import numpy as np
from ray import serve
from starlette.requests import Request


@serve.deployment(ray_actor_options={"num_gpus": 1, "num_cpus": 0.5})
class Model:
    def __init__(self) -> None:
        self.weights = np.random.default_rng(7).normal(size=(64, 8))

    async def __call__(self, request: Request) -> dict[str, list[float]]:
        features = await request.json()
        return {"output": (np.asarray(features) @ self.weights).tolist()}


app = Model.bind()
