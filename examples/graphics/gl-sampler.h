/* SPDX-License-Identifier: MIT */
/* What a GL renderer does with a shared frame: samples it in a shader.  A full-screen
 * triangle draws the frame's texture into a texture of the consumer's own through a
 * sampler2D, texel for texel (texelFetch at each fragment's own coordinates), so the
 * result can be checked byte for byte against what the producer rendered.  GLSL is
 * compiled by the driver at run time: no shader tools at build time. */
#ifndef GPUSHM_EXAMPLES_GL_SAMPLER_H
#define GPUSHM_EXAMPLES_GL_SAMPLER_H

#include <gpushm-gl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* By value: the program's GL headers may be GL 1.x's. */
#define GLS_FRAGMENT_SHADER 0x8B30
#define GLS_VERTEX_SHADER 0x8B31
#define GLS_COMPILE_STATUS 0x8B81
#define GLS_LINK_STATUS 0x8B82
#define GLS_FRAMEBUFFER 0x8D40
#define GLS_COLOR_ATTACHMENT0 0x8CE0
#define GLS_FRAMEBUFFER_COMPLETE 0x8CD5
#define GLS_TEXTURE_MIN_FILTER 0x2801
#define GLS_NEAREST 0x2600

struct gl_sampler {
  GLuint (*CreateShader)(GLenum);
  void (*ShaderSource)(GLuint, GLsizei, const char *const *, const GLint *);
  void (*CompileShader)(GLuint);
  void (*GetShaderiv)(GLuint, GLenum, GLint *);
  void (*GetShaderInfoLog)(GLuint, GLsizei, GLsizei *, char *);
  void (*DeleteShader)(GLuint);
  GLuint (*CreateProgram)(void);
  void (*AttachShader)(GLuint, GLuint);
  void (*LinkProgram)(GLuint);
  void (*GetProgramiv)(GLuint, GLenum, GLint *);
  void (*GetProgramInfoLog)(GLuint, GLsizei, GLsizei *, char *);
  void (*UseProgram)(GLuint);
  void (*DeleteProgram)(GLuint);
  void (*CreateVertexArrays)(GLsizei, GLuint *);
  void (*BindVertexArray)(GLuint);
  void (*DeleteVertexArrays)(GLsizei, const GLuint *);
  void (*CreateFramebuffers)(GLsizei, GLuint *);
  void (*NamedFramebufferTexture)(GLuint, GLenum, GLuint, GLint);
  GLenum (*CheckNamedFramebufferStatus)(GLuint, GLenum);
  void (*BindFramebuffer)(GLenum, GLuint);
  void (*DeleteFramebuffers)(GLsizei, const GLuint *);
  void (*BindTextureUnit)(GLuint, GLuint);
  void (*Viewport)(GLint, GLint, GLsizei, GLsizei);
  void (*DrawArrays)(GLenum, GLint, GLsizei);
  GLuint program, vao, fbo, target;
  GLsizei width, height;
};

static const char gl_sampler_vertex[] =
  "#version 450 core\n"
  "void main() {\n"
  "  vec2 p = vec2((gl_VertexID << 1) & 2, gl_VertexID & 2); /* (0,0) (2,0) (0,2) */\n"
  "  gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0);\n"
  "}\n";
static const char gl_sampler_fragment[] =
  "#version 450 core\n"
  "layout(binding = 0) uniform sampler2D frame;\n"
  "layout(location = 0) out vec4 color;\n"
  "void main() { color = texelFetch(frame, ivec2(gl_FragCoord.xy), 0); }\n";

static inline GLuint gl_sampler_shader(struct gl_sampler *s, GLenum type, const char *source,
                                       char *why, size_t len)
{
  GLuint shader = s->CreateShader(type);
  GLint ok = 0;
  char log[256] = "";

  s->ShaderSource(shader, 1, &source, NULL);
  s->CompileShader(shader);
  s->GetShaderiv(shader, GLS_COMPILE_STATUS, &ok);
  if (!ok) {
    s->GetShaderInfoLog(shader, sizeof log, NULL, log);
    snprintf(why, len, "the %s shader does not compile: %s",
             type == GLS_VERTEX_SHADER ? "vertex" : "fragment", log);
    s->DeleteShader(shader);
    return 0;
  }
  return shader;
}

/* The program and a target texture of width x height in format (the frame's); 0 or -1
 * with why. */
static inline int gl_sampler_open(struct gl_sampler *s, const gpushm_gl_t *gl,
                                  void *(*get_proc)(const char *), GLenum format, GLsizei width,
                                  GLsizei height, char *why, size_t len)
{
  static const struct { const char *name; size_t offset; } entries[] = {
#define GLS_ENTRY(field) { "gl" #field, offsetof(struct gl_sampler, field) }
    GLS_ENTRY(CreateShader), GLS_ENTRY(ShaderSource), GLS_ENTRY(CompileShader),
    GLS_ENTRY(GetShaderiv), GLS_ENTRY(GetShaderInfoLog), GLS_ENTRY(DeleteShader),
    GLS_ENTRY(CreateProgram), GLS_ENTRY(AttachShader), GLS_ENTRY(LinkProgram),
    GLS_ENTRY(GetProgramiv), GLS_ENTRY(GetProgramInfoLog), GLS_ENTRY(UseProgram),
    GLS_ENTRY(DeleteProgram), GLS_ENTRY(CreateVertexArrays), GLS_ENTRY(BindVertexArray),
    GLS_ENTRY(DeleteVertexArrays), GLS_ENTRY(CreateFramebuffers),
    GLS_ENTRY(NamedFramebufferTexture), GLS_ENTRY(CheckNamedFramebufferStatus),
    GLS_ENTRY(BindFramebuffer), GLS_ENTRY(DeleteFramebuffers), GLS_ENTRY(BindTextureUnit),
    GLS_ENTRY(Viewport), GLS_ENTRY(DrawArrays),
#undef GLS_ENTRY
  };
  GLuint vertex, fragment;
  GLint ok = 0;
  char log[256] = "";

  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void *p = get_proc(entries[i].name);
    if (!p) {
      snprintf(why, len, "no %s in this GL (GL 4.5 core)", entries[i].name);
      return -1;
    }
    memcpy((char *)s + entries[i].offset, &p, sizeof p);
  }
  if (!(vertex = gl_sampler_shader(s, GLS_VERTEX_SHADER, gl_sampler_vertex, why, len)) ||
      !(fragment = gl_sampler_shader(s, GLS_FRAGMENT_SHADER, gl_sampler_fragment, why, len)))
    return -1;
  s->program = s->CreateProgram();
  s->AttachShader(s->program, vertex);
  s->AttachShader(s->program, fragment);
  s->LinkProgram(s->program);
  s->DeleteShader(vertex);
  s->DeleteShader(fragment);
  s->GetProgramiv(s->program, GLS_LINK_STATUS, &ok);
  if (!ok) {
    s->GetProgramInfoLog(s->program, sizeof log, NULL, log);
    snprintf(why, len, "the sampling program does not link: %s", log);
    return -1;
  }
  s->CreateVertexArrays(1, &s->vao); /* core profile: a draw needs one, even empty */
  gl->CreateTextures(GL_TEXTURE_2D, 1, &s->target);
  gl->TextureStorage2D(s->target, 1, format, width, height);
  s->CreateFramebuffers(1, &s->fbo);
  s->NamedFramebufferTexture(s->fbo, GLS_COLOR_ATTACHMENT0, s->target, 0);
  if (s->CheckNamedFramebufferStatus(s->fbo, GLS_FRAMEBUFFER) != GLS_FRAMEBUFFER_COMPLETE) {
    snprintf(why, len, "a framebuffer of the frame's format is not complete here");
    return -1;
  }
  s->width = width;
  s->height = height;
  return 0;
}

/* Draws frame (a texture of the frame's size) into s->target through the sampler. */
static inline void gl_sampler_draw(struct gl_sampler *s, const gpushm_gl_t *gl, GLuint frame)
{
  /* one level, no mipmaps: sampled as it is (texelFetch reads level 0 regardless, but a
   * texture incomplete for its filter reads as zeros) */
  gl->TextureParameteri(frame, GLS_TEXTURE_MIN_FILTER, GLS_NEAREST);
  s->BindFramebuffer(GLS_FRAMEBUFFER, s->fbo);
  s->Viewport(0, 0, s->width, s->height);
  s->UseProgram(s->program);
  s->BindVertexArray(s->vao);
  s->BindTextureUnit(0, frame);
  s->DrawArrays(GL_TRIANGLES, 0, 3);
  s->BindFramebuffer(GLS_FRAMEBUFFER, 0);
}

static inline void gl_sampler_close(struct gl_sampler *s, const gpushm_gl_t *gl)
{
  if (s->fbo)
    s->DeleteFramebuffers(1, &s->fbo);
  if (s->target)
    gl->DeleteTextures(1, &s->target);
  if (s->vao)
    s->DeleteVertexArrays(1, &s->vao);
  if (s->program)
    s->DeleteProgram(s->program);
}

#endif
