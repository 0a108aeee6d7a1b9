"""The output types the typed-result tests share (``from .models import Weather``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pydantic
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

import managedloop as ml


class Sky(enum.Enum):
    SUNNY = "sunny"
    CLOUDY = "cloudy"
    RAIN = "rain"


class Temperature(pydantic.BaseModel):
    celsius: float
    feels_like: float | None = None


class Weather(pydantic.BaseModel):
    """The acceptance type: a nested model and an enum."""

    city: str
    sky: Sky
    temperature: Temperature


GOOD = {"city": "Paris", "sky": "sunny", "temperature": {"celsius": 21.5}}
BAD = {"city": "Paris", "sky": "snow"}  # not a Sky, and no temperature


@dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


@ml.tool
def get_forecast(city: str) -> str:
    """The forecast for a city."""
    return f"Sunny and 21.5 C in {city}"


def in_europe(weather: Weather) -> Weather:
    """An output validator: the model is asked again for a city outside this list."""
    if weather.city not in {"Paris", "Oslo", "Rome"}:
        raise ml.ModelRetry(f"{weather.city} is not in Europe: pick a European city")
    return weather
