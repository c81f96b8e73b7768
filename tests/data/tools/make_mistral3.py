#!/usr/bin/python3
# Makes models/mistral3.gguf from models/llama.gguf (gguf-py from a llama.cpp tree): python3 make_mistral3.py models/llama.gguf models/mistral3.gguf
import sys
sys.path.insert(0, '/tmp/llama.cpp-anchor/llama.cpp/gguf-py')
import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType
r = GGUFReader(sys.argv[1]); w = GGUFWriter(sys.argv[2], 'mistral3')
for k, f in r.fields.items():
    if k.startswith('GGUF.') or k == 'general.architecture': continue
    t = f.types[0]; k2 = k.replace('llama.', 'mistral3.', 1) if k.startswith('llama.') else k
    if t == GGUFValueType.ARRAY:
        st = f.types[1]
        if st == GGUFValueType.STRING: val = [bytes(f.parts[i]).decode('utf-8', 'surrogateescape') for i in f.data]
        else: val = [f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(k2, val, t, sub_type=st)
    elif t == GGUFValueType.STRING: w.add_key_value(k2, bytes(f.parts[f.data[0]]).decode(), t)
    else: w.add_key_value(k2, f.parts[f.data[0]].tolist()[0], t)
# Ministral 3's rope: YaRN (factor 16 over an original context of 16 here, so the 100-token cases reach it),
# mscale_all_dim 1, Llama 4 attention temperature 0.1
w.add_string('mistral3.rope.scaling.type', 'yarn')
w.add_float32('mistral3.rope.scaling.factor', 16.0)
w.add_uint32('mistral3.rope.scaling.original_context_length', 16)
w.add_float32('mistral3.rope.scaling.yarn_log_multiplier', 1.0)
w.add_float32('mistral3.attention.temperature_scale', 0.1)
for t in r.tensors: w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
