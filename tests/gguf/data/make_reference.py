# Writes reference_qwen35.gguf with llama.cpp's own Python writer (pip package `gguf`, 0.19.0 when
# it was made), so the C++ reader is checked against a file it did not write itself: Qwen3.5-27B's
# delta-net keys as the converter names them, one value of every type, arrays kept and skipped, and
# one tensor info plus its data after the metadata. Run: python3 make_reference.py
import numpy as np
import gguf

w = gguf.GGUFWriter("reference_qwen35.gguf", "qwen35")
w.add_name("Qwen3.5-27B")
w.add_block_count(64)
w.add_ssm_conv_kernel(4)
w.add_ssm_state_size(128)
w.add_ssm_group_count(16)
w.add_ssm_time_step_rank(48)
w.add_ssm_inner_size(128 * 48)
w.add_full_attention_interval(4)
w.add_uint8("t.u8", 250)
w.add_int8("t.i8", -120)
w.add_uint16("t.u16", 65000)
w.add_int16("t.i16", -32000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 0.15625)
w.add_bool("t.bool", True)
w.add_string("t.str", "h\u00e9llo")
w.add_uint64("t.u64", 2**64 - 1)
w.add_int64("t.i64", -2**63)
w.add_float64("t.f64", -0.25)
w.add_array("t.arr_i32", [11, 11, 10, 0])
w.add_array("t.arr_str", ["<s>", "", "tok"])
w.add_token_list(["<s>", "</s>", "a"])
w.add_key_value("t.big_u8", [n % 256 for n in range(5000)], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8)  # over the keep limit
w.add_tensor("blk.0.ssm_a", np.arange(48, dtype=np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
