#!/usr/bin/python3
"""Renders the templates in this directory over fixed conversations (tools, tool calls and results, reasoning, the
thinking switch, reasoning effort) with Jinja2 set up as Hugging Face's apply_chat_template does it, and writes the
cases to ../chat-templates-2026.json (the format of ../chat-templates.json: test_chat_templates.c checks both).
Needs python3-jinja2 (Debian). Usage: python3 render.py"""
import json, os, datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

here = os.path.dirname(os.path.abspath(__file__))

def raise_exception(msg):
    raise TemplateError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(fmt):
    return datetime.datetime(2026, 11, 21).strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson'] = tojson
env.globals['raise_exception'] = raise_exception
env.globals['strftime_now'] = strftime_now

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                         "unit": {"type": "string", "enum": ["C", "F"]}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
          "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}
CONVS = {
    "plain": {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
                           {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What is 2+2? Ünïcode ✓"}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "tool_round_trip": {"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
                                     {"role": "assistant", "content": "", "tool_calls": [CALL]},
                                     {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}], "tools": TOOLS},
    "reasoning_history": {"messages": [{"role": "user", "content": "2+2?"},
                                       {"role": "assistant", "content": "4", "reasoning_content": "Add them.", "thinking": "Add them."},
                                       {"role": "user", "content": "And 3+3?"}]},
    "thinking_off": {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
    "effort_high": {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "high"},
}
TEMPLATES = {"gpt-oss": ("gpt-oss.jinja", "<|startoftext|>", "<|return|>"),
             "qwen3.5": ("qwen3.5.jinja", "", "<|im_end|>"),
             "gemma4": ("gemma4.jinja", "<bos>", "<eos>")}
cases = []
for tname, (fname, bos, eos) in TEMPLATES.items():
    src = open(os.path.join(here, fname)).read()
    t = env.from_string(src)
    for cname, conv in CONVS.items():
        ctx = dict(conv)
        ctx.update(bos_token=bos, eos_token=eos, add_generation_prompt=True)
        try:
            out = t.render(**ctx)
        except TemplateError as e:
            print(f"{tname}/{cname}: {e} (left out)")
            continue
        case = {"name": f"{tname}/{cname}", "template": src, "bos_token": bos, "eos_token": eos,
                "messages": conv["messages"], "add_generation_prompt": True, "expected": out}
        for k, v in conv.items():
            if k != "messages": case[k] = v
        cases.append(case)
with open(os.path.join(here, "..", "chat-templates-2026.json"), "w") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
print(f"{len(cases)} cases")
