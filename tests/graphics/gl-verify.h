/* SPDX-License-Identifier: MIT */
/* The GL consumer's check, on the GPU: a GL compute shader counts the words of a buffer
 * object that differ from the test pattern (tests/gpu/kernels.cu's pattern_word). */
#ifndef GPUSHM_TEST_GL_VERIFY_H
#define GPUSHM_TEST_GL_VERIFY_H

#include "egl-context.h"
#include "gpushm-gl.h"

static const char glv_source[] =
  "#version 430\n"
  "layout(local_size_x = 256) in;\n"
  "layout(std430, binding = 0) readonly buffer Data { uint words[]; };\n"
  "layout(std430, binding = 1) buffer Result { uint errors; };\n"
  "uniform uint n; uniform uint seed;\n"
  "void main() {\n"
  "  uint i = gl_GlobalInvocationID.x;\n"
  "  if (i < n && words[i] != ((i * 2654435761u) ^ seed)) atomicAdd(errors, 1u);\n"
  "}\n";

/* n words of the pattern seed in buffer: how many differ; -1 if the check could not run. */
static inline long glv_words(gpushm_gl_t *gl, GLuint buffer, uint32_t n, uint32_t seed)
{
  GLuint (*create_shader)(GLenum), (*create_program)(void);
  void (*shader_source)(GLuint, GLsizei, const char *const *, const GLint *);
  void (*compile)(GLuint), (*attach)(GLuint, GLuint), (*link)(GLuint), (*use)(GLuint);
  void (*delete_shader)(GLuint), (*delete_program)(GLuint);
  void (*bind_base)(GLenum, GLuint, GLuint), (*dispatch)(GLuint, GLuint, GLuint);
  void (*uniform_ui)(GLint, GLuint), (*barrier)(GLbitfield), (*finish)(void);
  void (*storage)(GLuint, GLsizeiptr, const void *, GLbitfield);
  void (*get_sub)(GLuint, GLintptr, GLsizeiptr, void *);
  void (*get_program)(GLuint, GLenum, GLint *);
  GLint (*uniform_location)(GLuint, const char *);
  const char *src = glv_source;
  GLuint shader, program, result;
  GLint linked = 0;
  uint32_t errors = 0, zero = 0;

#define GLV_LOAD(var, name)                                                                \
  do {                                                                                     \
    *(void **)&var = eglc_proc(name);                                                      \
    if (!var)                                                                              \
      return -1;                                                                           \
  } while (0)
  GLV_LOAD(create_shader, "glCreateShader");
  GLV_LOAD(create_program, "glCreateProgram");
  GLV_LOAD(shader_source, "glShaderSource");
  GLV_LOAD(compile, "glCompileShader");
  GLV_LOAD(attach, "glAttachShader");
  GLV_LOAD(link, "glLinkProgram");
  GLV_LOAD(use, "glUseProgram");
  GLV_LOAD(delete_shader, "glDeleteShader");
  GLV_LOAD(delete_program, "glDeleteProgram");
  GLV_LOAD(bind_base, "glBindBufferBase");
  GLV_LOAD(dispatch, "glDispatchCompute");
  GLV_LOAD(uniform_ui, "glUniform1ui");
  GLV_LOAD(barrier, "glMemoryBarrier");
  GLV_LOAD(finish, "glFinish");
  GLV_LOAD(storage, "glNamedBufferStorage");
  GLV_LOAD(get_sub, "glGetNamedBufferSubData");
  GLV_LOAD(get_program, "glGetProgramiv");
  GLV_LOAD(uniform_location, "glGetUniformLocation");
#undef GLV_LOAD
  shader = create_shader(0x91B9 /* GL_COMPUTE_SHADER */);
  shader_source(shader, 1, &src, NULL);
  compile(shader);
  program = create_program();
  attach(program, shader);
  link(program);
  get_program(program, 0x8B82 /* GL_LINK_STATUS */, &linked);
  if (!linked)
    return -1;
  use(program);
  gl->CreateBuffers(1, &result);
  storage(result, 4, &zero, 0x0100 /* GL_DYNAMIC_STORAGE_BIT */);
  bind_base(0x90D2 /* GL_SHADER_STORAGE_BUFFER */, 0, buffer);
  bind_base(0x90D2, 1, result);
  uniform_ui(uniform_location(program, "n"), n);
  uniform_ui(uniform_location(program, "seed"), seed);
  dispatch((n + 255) / 256, 1, 1);
  barrier(0xFFFFFFFF);
  finish();
  get_sub(result, 0, 4, &errors);
  gl->DeleteBuffers(1, &result);
  use(0);
  delete_program(program);
  delete_shader(shader);
  return gl->GetError() == GL_NO_ERROR ? (long)errors : -1;
}

#endif
